// The data path (src/core/chunk_runner.h) without MPI, threads or an engine: N ranks' runners over
// the in-memory fabric (fabric.h), which moves the first message of each link per tick, in posting
// order, like a link.
// Checks the results of every algorithm and of broadcasts, and that the scheduler lets an urgent op
// overtake a bulk op that started first, whatever the two ops' kinds (and, in FIFO mode, that it
// does not).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <numeric>
#include <vector>

#include "algo/registry.h"
#include "core/chunk_runner.h"
#include "core/op_matcher.h"
#include "fabric.h"
#include "prioccl/prioccl.hpp"

namespace {

using prioccl::AlgoEntry;
using prioccl::Completion;
using prioccl::Config;
using prioccl::test::Fabric;
using prioccl::test::FabricTransport;
using prioccl::test::kTagSpace;
using namespace prioccl::detail;

// One rank: its runner, and the part of the engine's loop that feeds it.
class Rank final : public ChunkRunner::Events {
 public:
  Rank(Fabric& fabric, int rank, int size, const Config& config)
      : transport_(fabric, rank, size),
        stats_("", rank, size, {}),
        transfers_(transport_, kTagSpace - 1, {}, 64, false),
        runner_(config, rank, size, kTagSpace - 1, transfers_, stats_, *this) {}

  void agreementDone(const AgreementChunk&, std::shared_ptr<OpState>) override {
    ADD_FAILURE() << "no agreement runs in these tests";
  }
  void opEnded(OpState& op) override {
    done.push_back(&op);
    chunksAtDone.push_back(stats_.snapshot().chunksCompleted);
  }

  void add(std::shared_ptr<OpState> op) { runner_.add(kNamedLane, std::move(op)); }
  void round() {
    runner_.activate();
    runner_.postSends();
    std::vector<Completion> completions;
    transport_.poll(completions);
    for (const Completion& c : completions) {
      const Transfers::Posted p = transfers_.at(c.cookie);
      transfers_.release(c.cookie);
      runner_.onData(p, c.bytes, Transfers::Clock::now());
    }
    runner_.activate();
    runner_.postSends();
    runner_.retire();
  }
  bool empty() const { return runner_.empty(); }
  uint64_t preemptions() const { return stats_.snapshot().preemptions; }

  std::vector<const OpState*> done;    // in the order they finished
  std::vector<uint64_t> chunksAtDone;  // chunks this rank had completed when each finished

 private:
  FabricTransport transport_;
  OpStats stats_;
  Transfers transfers_;
  ChunkRunner runner_;
};

Config smallChunks(priocclSchedule_t schedule) {
  Config c;
  c.chunkBytes = 64 << 10;
  c.creditBytes = 128 << 10;
  c.schedule = schedule;
  return c;
}

// Which collective an Op is: an all-reduce, a broadcast from / a reduce to `root`, an all-gather
// or a reduce-scatter.
struct What {
  OpState::Kind kind = OpState::Kind::kAllReduce;
  int root = -1;
};
const What kAllReduce{};
const What kAllGather{OpState::Kind::kAllGather, -1};
const What kReduceScatter{OpState::Kind::kReduceScatter, -1};
const What kAllToAll{OpState::Kind::kAllToAll, -1};
What broadcastFrom(int root) {
  return {OpState::Kind::kBroadcast, root};
}
What reduceTo(int root) {
  return {OpState::Kind::kReduce, root};
}

// Rank r contributes r + 1 + j at element j of its input: every result is exact in int32. `count`
// is per rank for an all-gather and a reduce-scatter (nranks blocks of it in recv / send).
struct Op {
  std::vector<int32_t> in, out;
  std::shared_ptr<OpState> state = std::make_shared<OpState>();
  What what;
  int rank;
  size_t count;
  Op(int rank, size_t count, int priority, priocclAlgorithm_t algorithm, What what = kAllReduce,
     int nranks = 1)
      : in(count *
           (what.kind == OpState::Kind::kReduceScatter || what.kind == OpState::Kind::kAllToAll
                ? nranks
                : 1)),
        out(count * (what.kind == OpState::Kind::kAllGather || what.kind == OpState::Kind::kAllToAll
                         ? nranks
                         : 1)),
        what(what),
        rank(rank),
        count(count) {
    std::iota(in.begin(), in.end(), rank + 1);
    state->kind = what.kind;
    state->root = what.root;
    state->send = in.data();
    // As the API passes it: only a reduce's root has a receive buffer.
    bool receives = what.kind != OpState::Kind::kReduce || rank == what.root;
    state->recv = receives ? out.data() : nullptr;
    state->count = count;
    state->dtype = priocclInt32;
    state->op = priocclSum;
    state->priority = priority;
    state->named = true;
    state->algorithm = algorithm;
  }
  // Element k of the result: the sum of the contributing ranks' inputs at the matching index (an
  // all-reduce, a reduce's root, a reduce-scatter's block), the root's input (a broadcast), each
  // rank's input in its block (an all-gather), or nothing written (a reduce's other ranks).
  bool correct(int nranks) const {
    using Kind = OpState::Kind;
    for (size_t k = 0; k < out.size(); ++k) {
      int64_t want = 0;
      for (int r = 0; r < nranks; ++r) {
        int64_t at = static_cast<int64_t>(k);  // the index into rank r's input
        bool contributes = true;
        switch (what.kind) {
          case Kind::kBroadcast:
            contributes = r == what.root;
            break;
          case Kind::kReduce:
            contributes = rank == what.root;
            break;
          case Kind::kAllGather:
            contributes = static_cast<size_t>(r) == k / count;
            at = static_cast<int64_t>(k % count);
            break;
          case Kind::kReduceScatter:
            at = static_cast<int64_t>(static_cast<size_t>(rank) * count + k);
            break;
          case Kind::kAllToAll:  // block b comes from rank b: its block for this rank
            contributes = static_cast<size_t>(r) == k / count;
            at = static_cast<int64_t>(static_cast<size_t>(rank) * count + k % count);
            break;
          default:
            break;
        }
        if (contributes) want += r + 1 + at;
      }
      if (out[k] != want) return false;
    }
    return true;
  }
};

// Runs every rank until all are empty; fails after `limit` rounds.
void runAll(Fabric& fabric, std::vector<std::unique_ptr<Rank>>& ranks, int limit = 100000) {
  for (int i = 0; i < limit; ++i) {
    bool empty = true;
    for (auto& r : ranks) {
      r->round();
      empty &= r->empty();
    }
    if (empty) return;
    fabric.deliver(true);
  }
  FAIL() << "the runners did not finish in " << limit << " rounds";
}

TEST(ChunkRunner, EveryAlgorithmSumsExactlyOnThreeRanks) {
  for (const AlgoEntry& algo : prioccl::algoRegistry()) {
    SCOPED_TRACE(algo.name);
    const int n = 3;
    Fabric fabric;
    std::vector<std::unique_ptr<Rank>> ranks;
    std::vector<std::unique_ptr<Op>> ops;
    for (int r = 0; r < n; ++r) {
      ranks.push_back(std::make_unique<Rank>(fabric, r, n, smallChunks(priocclSchedulePriority)));
      // 300,001 elements: several chunks, the last one short.
      ops.push_back(std::make_unique<Op>(r, 300001, 0, algo.id));
      ranks[r]->add(ops[r]->state);
    }
    runAll(fabric, ranks);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(ranks[r]->done.size(), 1u) << "rank " << r;
      EXPECT_TRUE(ops[r]->correct(n)) << "rank " << r;
    }
  }
}

// All-gathers, reduce-scatters and all-to-alls on 1-5 ranks, as one chunk and as many (the last one
// short).
TEST(ChunkRunner, BlockCollectives) {
  for (int n = 1; n <= 5; ++n) {
    for (size_t count : {size_t{1}, size_t{1000}, size_t{100001}})
      for (What what : {kAllGather, kReduceScatter, kAllToAll}) {
        SCOPED_TRACE(testing::Message()
                     << n << " ranks, " << kindName(what.kind) << ", count " << count);
        Fabric fabric;
        std::vector<std::unique_ptr<Rank>> ranks;
        std::vector<std::unique_ptr<Op>> ops;
        for (int r = 0; r < n; ++r) {
          ranks.push_back(
              std::make_unique<Rank>(fabric, r, n, smallChunks(priocclSchedulePriority)));
          ops.push_back(std::make_unique<Op>(r, count, 0, priocclAlgoAuto, what, n));
          ranks[r]->add(ops[r]->state);
        }
        runAll(fabric, ranks);
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(ranks[r]->done.size(), 1u) << "rank " << r;
          EXPECT_TRUE(ops[r]->correct(n)) << "rank " << r;
        }
      }
  }
}

// Broadcasts and reduces from every root on 2-5 ranks, as one chunk (the binomial tree from 4 ranks
// up) and as many (the chain): every rank ends with the root's data, the root with the sum.
TEST(ChunkRunner, RootedCollectivesFromEveryRoot) {
  for (int n = 2; n <= 5; ++n) {
    for (int root = 0; root < n; ++root) {
      for (size_t count : {size_t{1000}, size_t{300001}})
        for (What what : {broadcastFrom(root), reduceTo(root)}) {
          SCOPED_TRACE(testing::Message() << n << " ranks, " << kindName(what.kind) << " root "
                                          << root << ", count " << count);
          Fabric fabric;
          std::vector<std::unique_ptr<Rank>> ranks;
          std::vector<std::unique_ptr<Op>> ops;
          for (int r = 0; r < n; ++r) {
            ranks.push_back(
                std::make_unique<Rank>(fabric, r, n, smallChunks(priocclSchedulePriority)));
            ops.push_back(std::make_unique<Op>(r, count, 0, priocclAlgoAuto, what));
            ranks[r]->add(ops[r]->state);
          }
          runAll(fabric, ranks);
          for (int r = 0; r < n; ++r) {
            EXPECT_EQ(ranks[r]->done.size(), 1u) << "rank " << r;
            EXPECT_TRUE(ops[r]->correct(n)) << "rank " << r;
          }
        }
    }
  }
}

// A bulk op of 32 chunks runs for a few ticks, then an urgent one-chunk op joins the same lane.
// Returns, per rank, how many chunks the rank had completed when the urgent op finished.
// `totals` (optional): per rank, how many chunks it completed in all.
std::vector<uint64_t> urgentAfterBulk(priocclSchedule_t schedule, uint64_t* preemptions,
                                      What bulkWhat = kAllReduce, What urgentWhat = kAllReduce,
                                      int n = 2, std::vector<uint64_t>* totals = nullptr) {
  Fabric fabric;
  std::vector<std::unique_ptr<Rank>> ranks;
  std::vector<std::unique_ptr<Op>> bulk, urgent;
  for (int r = 0; r < n; ++r) {
    ranks.push_back(std::make_unique<Rank>(fabric, r, n, smallChunks(schedule)));
    bulk.push_back(std::make_unique<Op>(r, 32 * (16 << 10), 10, priocclAlgoRing, bulkWhat, n));
    urgent.push_back(std::make_unique<Op>(r, 16 << 10, 0, priocclAlgoRing, urgentWhat, n));
    ranks[r]->add(bulk[r]->state);
  }
  for (int i = 0; i < 4; ++i) {
    for (auto& r : ranks) r->round();
    fabric.deliver(true);
  }
  for (int r = 0; r < n; ++r) ranks[r]->add(urgent[r]->state);
  runAll(fabric, ranks);
  std::vector<uint64_t> chunksBefore;
  *preemptions = 0;
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(bulk[r]->correct(n) && urgent[r]->correct(n)) << "rank " << r;
    const auto& done = ranks[r]->done;
    EXPECT_EQ(done.size(), 2u);
    for (size_t i = 0; i < done.size(); ++i)
      if (done[i] == urgent[r]->state.get()) chunksBefore.push_back(ranks[r]->chunksAtDone[i]);
    if (totals) totals->push_back(ranks[r]->chunksAtDone.back());
    *preemptions += ranks[r]->preemptions();
  }
  return chunksBefore;
}

TEST(ChunkRunner, UrgentOpOvertakesABulkOpThatStartedFirst) {
  uint64_t preemptions = 0;
  std::vector<uint64_t> chunks = urgentAfterBulk(priocclSchedulePriority, &preemptions);
  ASSERT_EQ(chunks.size(), 2u);
  // Its one chunk, and at most the few bulk chunks already under way when it arrived.
  for (uint64_t c : chunks) EXPECT_LE(c, 6u) << "the urgent op waited behind the bulk op";
  EXPECT_GT(preemptions, 0u);
}

TEST(ChunkRunner, FifoModeKeepsTheUrgentOpBehindTheBulkOp) {
  uint64_t preemptions = 0;
  std::vector<uint64_t> chunks = urgentAfterBulk(priocclScheduleFifo, &preemptions);
  ASSERT_EQ(chunks.size(), 2u);
  for (uint64_t c : chunks) EXPECT_GE(c, 30u) << "FIFO mode let the urgent op overtake";
}

// The same with rooted collectives on 3 ranks: an urgent broadcast under a bulk all-reduce, an
// urgent all-reduce under a bulk broadcast, a broadcast under a broadcast from another root whose
// chain crosses the bulk one's busiest link (0 -> 1), a reduce under an all-reduce and the
// reverse, a broadcast under an all-gather and the reverse (the target pair), an
// all-gather under a reduce-scatter and the reverse, a broadcast under an all-to-all, an
// all-to-all under a reduce-scatter. Under priority scheduling no rank finishes more than a
// quarter of its chunks (a few bulk ones) before the urgent op; under FIFO some rank finishes
// nearly all of them first. (A share, not a count: the kinds other than all-reduce are cut into
// nranks times more chunks.) (Not every rank: FIFO is work-conserving, so a rank whose links the
// bulk op leaves idle between its chunks passes the urgent op's data in the gaps.)
TEST(ChunkRunner, UrgentOpOvertakesWhateverTheKinds) {
  const int n = 3;
  struct Pair {
    What bulk, urgent;
  };
  for (Pair p : {Pair{kAllReduce, broadcastFrom(1)}, Pair{broadcastFrom(0), kAllReduce},
                 Pair{broadcastFrom(0), broadcastFrom(2)}, Pair{kAllReduce, reduceTo(1)},
                 Pair{reduceTo(0), kAllReduce}, Pair{kAllGather, broadcastFrom(1)},
                 Pair{broadcastFrom(0), kAllGather}, Pair{kReduceScatter, kAllGather},
                 Pair{kAllGather, kReduceScatter}, Pair{kAllToAll, broadcastFrom(2)},
                 Pair{kReduceScatter, kAllToAll}}) {
    SCOPED_TRACE(testing::Message()
                 << "bulk " << kindName(p.bulk.kind) << " " << p.bulk.root << ", urgent "
                 << kindName(p.urgent.kind) << " " << p.urgent.root);
    for (priocclSchedule_t schedule : {priocclSchedulePriority, priocclScheduleFifo}) {
      uint64_t preemptions = 0;
      std::vector<uint64_t> totals;
      std::vector<uint64_t> chunks =
          urgentAfterBulk(schedule, &preemptions, p.bulk, p.urgent, n, &totals);
      ASSERT_EQ(chunks.size(), static_cast<size_t>(n));
      ASSERT_EQ(totals.size(), static_cast<size_t>(n));
      double most = 0;
      for (int r = 0; r < n; ++r)
        most = std::max(most, static_cast<double>(chunks[r]) / static_cast<double>(totals[r]));
      if (schedule == priocclSchedulePriority) {
        EXPECT_LE(most, 0.25) << "the urgent op waited behind the bulk op";
      } else {
        EXPECT_GE(most, 0.85) << "FIFO mode let the urgent op overtake on every rank";
      }
    }
  }
}

}  // namespace
