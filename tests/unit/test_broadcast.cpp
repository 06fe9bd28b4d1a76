// The broadcast step machine (src/algo/broadcast.h) on 1-9 simulated ranks, every root, both
// shapes, in and out of place, with transfers matched and completed in random orders: every rank
// ends with the root's bytes, the root's send buffer is untouched, and the shapes are trees of the
// promised depth.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "algo/broadcast.h"

namespace {

using prioccl::BroadcastChunk;
using prioccl::ChunkSpec;
using prioccl::RootTree;
using prioccl::Transfer;
using Shape = RootTree::Shape;

const char* name(Shape s) {
  return s == Shape::kChain ? "chain" : "binomial";
}

// The round in which each rank has the data when every rank sends one message per round, to its
// children in their order: the broadcast's latency in messages.
std::vector<int> rounds(Shape shape, int root, int p) {
  std::vector<int> round(p, -1), order{root};
  round[root] = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    int r = order[i], k = 0;
    for (int c : RootTree::children(shape, r, root, p)) {
      round[c] = round[r] + ++k;
      order.push_back(c);
    }
  }
  return round;
}

TEST(Broadcast, ShapesAreTreesOfTheirRounds) {
  for (Shape shape : {Shape::kChain, Shape::kBinomial})
    for (int p = 1; p <= 17; ++p)
      for (int root = 0; root < p; ++root) {
        SCOPED_TRACE(std::string(name(shape)) + " p=" + std::to_string(p) +
                     " root=" + std::to_string(root));
        std::vector<int> parentSeen(p, 0);
        for (int r = 0; r < p; ++r) {
          std::vector<int> kids = RootTree::children(shape, r, root, p);
          for (size_t k = 0; k < kids.size(); ++k) {
            int c = kids[k];
            ASSERT_EQ(RootTree::parent(shape, c, root, p), r);
            ASSERT_EQ(RootTree::place(shape, c, root, p), static_cast<int>(k)) << "child " << c;
            ++parentSeen[c];
          }
        }
        for (int r = 0; r < p; ++r) EXPECT_EQ(parentSeen[r], r == root ? 0 : 1) << "rank " << r;
        std::vector<int> round = rounds(shape, root, p);
        EXPECT_EQ(*std::min_element(round.begin(), round.end()), 0) << "a rank never reached";
        int log2 = 0;
        while ((1 << log2) < p) ++log2;
        EXPECT_EQ(*std::max_element(round.begin(), round.end()),
                  shape == Shape::kChain ? p - 1 : log2);
      }
}

// Runs one chunk per rank to the end, matching posted sends with posted receives at random.
void simulate(int p, int root, Shape shape, bool inPlace, size_t count, uint32_t seed) {
  SCOPED_TRACE(std::string(name(shape)) + " p=" + std::to_string(p) +
               " root=" + std::to_string(root) + (inPlace ? " in-place" : " out-of-place") +
               " count=" + std::to_string(count));
  std::mt19937 rng(seed);
  const size_t bytes = count * sizeof(int32_t);
  std::vector<std::vector<int32_t>> send(p, std::vector<int32_t>(count)),
      recv(p, std::vector<int32_t>(count, -1));
  for (int r = 0; r < p; ++r)
    for (size_t i = 0; i < count; ++i) send[r][i] = static_cast<int32_t>(r * 1000003 + i);
  const std::vector<int32_t> rootData = send[root];
  std::vector<std::unique_ptr<BroadcastChunk>> chunks;
  for (int r = 0; r < p; ++r) {
    ChunkSpec spec;
    spec.send = inPlace && r == root ? static_cast<void*>(recv[r].data()) : send[r].data();
    if (inPlace && r == root) recv[r] = send[r];
    spec.recv = recv[r].data();
    spec.count = count;
    spec.dtype = priocclInt32;
    spec.rank = r;
    spec.nranks = p;
    chunks.push_back(std::make_unique<BroadcastChunk>(spec, root, shape));
  }
  struct Posted {
    int rank;
    Transfer t;
  };
  std::vector<Posted> sends, recvs;
  std::vector<int> received(p, 0);
  for (;;) {
    for (int r = 0; r < p; ++r) {
      while (chunks[r]->recvReady()) recvs.push_back({r, chunks[r]->takeRecv()});
      while (chunks[r]->sendReady()) sends.push_back({r, chunks[r]->takeSend()});
    }
    std::vector<std::pair<size_t, size_t>> matches;
    for (size_t s = 0; s < sends.size(); ++s)
      for (size_t q = 0; q < recvs.size(); ++q)
        if (sends[s].t.peer == recvs[q].rank && recvs[q].t.peer == sends[s].rank &&
            sends[s].t.step == recvs[q].t.step)
          matches.emplace_back(s, q);
    if (matches.empty()) break;
    auto [s, q] = matches[std::uniform_int_distribution<size_t>(0, matches.size() - 1)(rng)];
    Posted out = sends[s], in = recvs[q];
    ASSERT_EQ(out.t.bytes, bytes);
    ASSERT_EQ(in.t.bytes, bytes);
    std::memcpy(in.t.buf, out.t.buf, bytes);
    sends.erase(sends.begin() + static_cast<long>(s));
    recvs.erase(recvs.begin() + static_cast<long>(q));
    ++received[in.rank];
    if (rng() % 2) {
      chunks[out.rank]->sendDone(out.t.step);
      chunks[in.rank]->recvDone(in.t.step);
    } else {
      chunks[in.rank]->recvDone(in.t.step);
      chunks[out.rank]->sendDone(out.t.step);
    }
  }
  EXPECT_TRUE(sends.empty() && recvs.empty()) << "unmatched transfers";
  for (int r = 0; r < p; ++r) {
    EXPECT_TRUE(chunks[r]->finished()) << "rank " << r;
    EXPECT_EQ(received[r], r == root ? 0 : 1) << "rank " << r;
    EXPECT_EQ(recv[r], rootData) << "rank " << r;
  }
  if (!inPlace) {
    EXPECT_EQ(send[root], rootData) << "the root's send buffer changed";
  }
}

TEST(Broadcast, EveryRankGetsTheRootsBytes) {
  uint32_t seed = 1;
  for (Shape shape : {Shape::kChain, Shape::kBinomial})
    for (int p = 1; p <= 9; ++p)
      for (int root = 0; root < p; ++root)
        for (bool inPlace : {false, true})
          for (size_t count : {size_t{1}, size_t{777}}) {
            simulate(p, root, shape, inPlace, count, seed++);
            if (::testing::Test::HasFatalFailure()) return;
          }
}

}  // namespace
