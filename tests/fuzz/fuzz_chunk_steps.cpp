// libFuzzer target: the input is a script that drives one chunk step machine (ring, tree,
// recursive doubling, halving-doubling, broadcast, reduce, all-gather, reduce-scatter, all-to-all
// or the agreement exchange) the way the
// engine may: take ready sends and receives, complete taken transfers in any order, and deliver
// whatever bytes the "peers" send (for non-exact receives, any length up to the posted size). The
// peers are the input, so malformed agreement headers, truncated messages and odd completion orders
// all occur.
//
// Besides crashes and sanitizer reports, a violation of the engine's contract with a chunk is a
// finding (abort): a transfer to a bad peer or reusing a (direction, peer, step) wire tag, a
// posted buffer written by the chunk before its completion, a receive overlapping another posted
// transfer, a chunk that finishes with transfers outstanding or stalls unfinished, an
// agreement that reports "agreed" although it received a malformed header, and one that wrote
// the receive buffer without reducing the op there; a broadcast that forwards data before it has
// it or ends with other bytes than the root's (or its parent's) in the receive buffer; a reduce
// that sends its partial result before every child's data is in, or sends (or leaves at the root)
// other bytes than its contribution reduced with its children's in their order; an all-gather or
// reduce-scatter that forwards a block before it has it, forwards other bytes than the block (or
// partial sum) it holds, receives elsewhere than its block's slice, or ends with other bytes in
// its receive buffer (or any outside its slices). The blocked kinds also run on uneven layouts
// (the v-variants: per-block counts and displacements, some slices empty).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "algo/agreement.h"
#include "algo/all_gather.h"
#include "algo/all_to_all.h"
#include "algo/broadcast.h"
#include "algo/host_layout.h"
#include "algo/point_to_point.h"
#include "algo/reduce_scatter.h"
#include "algo/reduce_to_root.h"
#include "algo/registry.h"
#include "common/error.h"
#include "common/scratch_pool.h"
#include "reduce/reduce.h"

namespace {

using namespace prioccl;
using detail::AgreementChunk;
using detail::AgreementHeader;
using detail::Announce;

constexpr priocclDataType_t kTypes[] = {
    priocclInt8,   priocclUint8,   priocclInt32,    priocclUint32,  priocclInt64,
    priocclUint64, priocclFloat16, priocclBfloat16, priocclFloat32, priocclFloat64};
constexpr priocclRedOp_t kOps[] = {priocclSum, priocclProd, priocclMin, priocclMax, priocclAvg};
constexpr size_t kHeader = sizeof(AgreementHeader);

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_chunk_steps: %s\n", what.c_str());
  std::abort();
}

// PRIOCCL_FUZZ_TRACE=1 prints each step of a run: rerun a reproducer with it to see the script.
const bool kTrace = std::getenv("PRIOCCL_FUZZ_TRACE") != nullptr;
template <typename... Args>
void trace(const char* format, Args... args) {
  if (kTrace) std::fprintf(stderr, format, args...);
}

// The input, read front to back; past its end every read yields 0.
class Script {
 public:
  Script(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool exhausted() const { return pos_ >= size_; }
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  size_t u16() {
    size_t lo = byte();
    return lo | static_cast<size_t>(byte()) << 8;
  }
  size_t below(size_t n) { return n <= 1 ? 0 : (n <= 256 ? byte() : u16()) % n; }
  // Fills dst from the input (zeros once it runs out).
  void fill(void* dst, size_t n) {
    size_t k = std::min(n, size_ - std::min(pos_, size_));
    if (k) std::memcpy(dst, data_ + pos_, k);
    if (n > k) std::memset(static_cast<unsigned char*>(dst) + k, 0, n - k);
    pos_ += k;
  }

 private:
  const uint8_t* data_;
  size_t size_, pos_ = 0;
};

// What a run exercises: a row of the algorithm registry (every all-reduce algorithm the engine
// can choose), or, past the last row, a broadcast chunk, a reduce chunk, an all-gather chunk, a
// reduce-scatter chunk, an all-to-all chunk, a point-to-point chunk, then the agreement chunk
// (the last).
size_t kinds() {
  return prioccl::algoRegistry().size() + 7;
}
bool isPointToPointKind(size_t kind) {
  return kind == prioccl::algoRegistry().size() + 5;
}
bool isAllToAllKind(size_t kind) {
  return kind == prioccl::algoRegistry().size() + 4;
}
bool isAllGatherKind(size_t kind) {
  return kind == prioccl::algoRegistry().size() + 2;
}
bool isReduceScatterKind(size_t kind) {
  return kind == prioccl::algoRegistry().size() + 3;
}
bool isBroadcastKind(size_t kind) {
  return kind == prioccl::algoRegistry().size();
}
bool isReduceKind(size_t kind) {
  return kind == prioccl::algoRegistry().size() + 1;
}
const char* kindName(size_t kind) {
  if (kind < prioccl::algoRegistry().size()) return prioccl::algoRegistry()[kind].name;
  if (isBroadcastKind(kind)) return "broadcast";
  if (isReduceKind(kind)) return "reduce";
  if (isAllGatherKind(kind)) return "allgather";
  if (isAllToAllKind(kind)) return "alltoall";
  if (isPointToPointKind(kind)) return "pointtopoint";
  return isReduceScatterKind(kind) ? "reducescatter" : "agreement";
}

struct Posted {
  bool send;
  Transfer t;
  std::vector<unsigned char> snapshot;  // the buffer when posted: nobody may write it meanwhile
};

struct Arrival {  // an agreement message as received
  int step;
  size_t bytes;
  size_t expected;  // the length of an agreeing peer's message
  bool wellFormed;
};

bool overlap(const Transfer& a, const Transfer& b) {
  auto pa = static_cast<const unsigned char*>(a.buf), pb = static_cast<const unsigned char*>(b.buf);
  return a.bytes && b.bytes && pa < pb + b.bytes && pb < pa + a.bytes;
}

class Run {
 public:
  explicit Run(Script& in) : in_(in) {}

  void go() {
    setUp();
    while (!algo_->finished() && !refused_) {
      const bool canSend = algo_->sendReady(), canRecv = algo_->recvReady();
      if (!canSend && !canRecv && posted_.empty()) finding("stalled: nothing to do, not finished");
      if (in_.exhausted()) return;
      int kinds[3], n = 0;
      if (canSend) kinds[n++] = 0;
      if (canRecv) kinds[n++] = 1;
      if (!posted_.empty()) kinds[n++] = 2;
      switch (kinds[in_.byte() % n]) {
        case 0:
          take(true, algo_->takeSend());
          break;
        case 1:
          take(false, algo_->takeRecv());
          break;
        default:
          complete(in_.below(posted_.size()));
      }
    }
    if (refused_) return;  // a point-to-point receive refused a header: the op has failed
    if (!posted_.empty()) finding("finished with transfers outstanding");
    if (algo_->recvReady() || algo_->sendReady()) finding("finished with a transfer ready");
    if (isAgreement()) checkVerdict();
    if (isBroadcast()) checkBroadcast();
    if (isBlocked()) checkBlocksAtEnd();
    if (isReduce() && spec_.rank == root_ &&
        std::memcmp(spec_.recv, partial(true).data(), send_.size()) != 0)
      finding("reduce's root ends with other bytes than the reduction");
  }

 private:
  void setUp() {
    kind_ = in_.byte() % kinds();
    spec_.nranks = 1 + in_.byte() % 8;
    if (isPointToPoint()) spec_.nranks = std::max(spec_.nranks, 2);  // a peer to talk to
    spec_.rank = in_.byte() % spec_.nranks;
    spec_.dtype = kTypes[in_.byte() % std::size(kTypes)];
    spec_.op = kOps[in_.byte() % 5];
    const uint8_t flags = in_.byte();
    const bool inPlace = flags & 1, carry = flags & 2, stale = flags & 4;
    halving_ = isAgreement() && carry && (flags & 8);  // on halving-doubling's rounds
    const size_t elem = reduce::dtypeSize(spec_.dtype);
    // Data chunks have count > 0; an agreement may announce count 0 (it then carries nothing).
    spec_.count = in_.u16() % 1024 + (isAgreement() ? 0 : 1);
    trace("%s nranks %d rank %d dtype %d op %d count %zu%s%s%s%s\n", kindName(kind_), spec_.nranks,
          spec_.rank, static_cast<int>(spec_.dtype), static_cast<int>(spec_.op), spec_.count,
          inPlace ? " in-place" : "", carry ? " carry" : "", halving_ ? " halving" : "",
          stale ? " stale-pool" : "");
    const size_t chunkBytes = spec_.count * elem;
    send_.resize(chunkBytes);
    in_.fill(send_.data(), std::min<size_t>(chunkBytes, 64));
    for (size_t i = 64; i < chunkBytes; ++i) send_[i] = static_cast<unsigned char>(i * 151);
    recv_.assign(inPlace ? 0 : chunkBytes, 0xEE);
    spec_.send = send_.data();
    spec_.recv = inPlace ? send_.data() : recv_.data();
    if (isBlocked()) setUpBlocks(inPlace, flags & 16);
    if (isBroadcast() || isReduce()) {
      root_ = in_.byte() % spec_.nranks;
      // As the API passes them: a broadcast's non-root ranks have no send buffer (out of place),
      // a reduce's no receive buffer.
      if (isBroadcast() && spec_.rank != root_ && !inPlace) spec_.send = nullptr;
      if (isReduce() && spec_.rank != root_) spec_.recv = nullptr;
      shape_ = flags & 8 ? RootTree::Shape::kBinomial : RootTree::Shape::kChain;
      children_ = RootTree::children(shape_, spec_.rank, root_, spec_.nranks).size();
      trace("root %d %s\n", root_, flags & 8 ? "binomial" : "chain");
    }

    size_t blockBytes = 0;
    if (isBroadcast() || isAllGather() || isAllToAll() || isPointToPoint()) {
      blockBytes = 0;  // no scratch
    } else if (isReduce() || isReduceScatter()) {
      blockBytes = chunkBytes;  // the engine's blocks hold at least a chunk
    } else if (!isAgreement()) {
      blockBytes = prioccl::algoRegistry()[kind_].scratchBytes(chunkBytes, spec_.nranks);
    } else {
      // As the engine: a payload only when carried, and maxPayload (the same on all ranks)
      // at least that; peers may send anything up to it.
      payload_ = carry ? chunkBytes : 0;
      maxPayload_ = payload_ + in_.byte();
      blockBytes = AgreementChunk::scratchBytes(maxPayload_);
    }
    pool_ = std::make_unique<ScratchPool>(blockBytes);
    if (isPointToPoint()) {
      // A send or a receive; with a header (the op's first chunk), the op's total is this chunk
      // or up to three more of its size.
      isSend_ = flags & 16;
      peer_ = (spec_.rank + 1 + in_.byte() % (spec_.nranks - 1)) % spec_.nranks;
      total_ = flags & 32 ? chunkBytes * (1 + in_.byte() % 4) : 0;
      trace("%s peer %d total %llu\n", isSend_ ? "send" : "recv", peer_,
            static_cast<unsigned long long>(total_));
      algo_ = std::make_unique<PointToPointChunk>(spec_, peer_, isSend_, total_);
    } else if (isBroadcast()) {
      if (spec_.rank == root_) data_.assign(send_.begin(), send_.end());
      algo_ = std::make_unique<BroadcastChunk>(spec_, root_, shape_);
    } else if (isAllGather()) {
      algo_ = std::make_unique<AllGatherChunk>(spec_);
    } else if (isAllToAll()) {
      algo_ = std::make_unique<AllToAllChunk>(spec_);
    } else if (isReduceScatter()) {
      algo_ = std::make_unique<ReduceScatterChunk>(spec_, *pool_);
    } else if (isReduce()) {
      contribution_ = send_;  // (in place, the root's result overwrites send_)
      algo_ = std::make_unique<ReduceChunk>(spec_, *pool_, root_, shape_);
    } else if (!isAgreement()) {
      if (prioccl::algoRegistry()[kind_].id == priocclAlgoHierarchical) {
        // Ranks spread over up to 3 hosts as the input says (any shape, uneven ones too).
        std::vector<std::string> keys;
        for (int r = 0; r < spec_.nranks; ++r) keys.push_back(std::to_string(in_.byte() % 3));
        layout_ = prioccl::HostLayout::fromKeys(keys);
        spec_.hosts = &layout_;
        trace("hosts %s\n", layout_.describe().c_str());
      }
      algo_ = prioccl::algoRegistry()[kind_].make(spec_, *pool_);
    } else {
      own_.key = in_.byte();
      own_.occurrence = in_.byte();
      own_.count = spec_.count;
      own_.dtype = spec_.dtype;
      own_.op = spec_.op;
      valid_ = ownHeader();
      // The engine's pool is shared by all agreement chunks: blocks come back holding an
      // earlier chunk's "all agree" header. Receives that leave bytes unwritten see it.
      std::vector<ScratchPool::Block> blocks(stale ? 3 : 0);
      for (ScratchPool::Block& b : blocks) {
        b = pool_->take();
        std::memset(b.get(), 0, blockBytes);
        std::memcpy(b.get(), &valid_, kHeader);
      }
      for (ScratchPool::Block& b : blocks) pool_->give(std::move(b));
      auto chunk =
          std::make_unique<AgreementChunk>(spec_, *pool_, own_, carry, maxPayload_, halving_);
      agreement_ = chunk.get();
      algo_ = std::move(chunk);
    }
  }

  // A well-formed header saying "all agree on own_", from a one-rank agreement (no constants
  // copied from the library).
  AgreementHeader ownHeader() {
    ChunkSpec solo = spec_;
    solo.rank = 0;
    solo.nranks = 1;
    solo.recv = const_cast<void*>(solo.send);  // in place: its result goes nowhere
    ScratchPool pool(AgreementChunk::scratchBytes(maxPayload_));
    AgreementChunk chunk(solo, pool, own_, payload_ > 0, maxPayload_);
    return chunk.verdict();
  }

  void take(bool send, const Transfer& t) {
    const std::string what = std::string(send ? "send" : "recv") + " step " +
                             std::to_string(t.step) + " peer " + std::to_string(t.peer);
    if (t.peer < 0 || t.peer >= spec_.nranks || t.peer == spec_.rank) finding("bad peer: " + what);
    if (!t.buf && t.bytes) finding("null buffer: " + what);
    if (!tags_.insert({send, t.peer, t.step}).second) finding("wire tag used twice: " + what);
    auto b = static_cast<const unsigned char*>(t.buf);
    // A receive never lands in the user's send buffer (out of place).
    if (!send && t.bytes && spec_.send != spec_.recv && b < send_.data() + send_.size() &&
        send_.data() < b + t.bytes)
      finding("receive into the send buffer: " + what);
    for (const Posted& p : posted_)
      if ((!send || !p.send) && overlap(t, p.t)) finding("overlaps a posted transfer: " + what);
    if (isBroadcast() && send) checkForwarded(t, what);
    if (isBlocked() && send) checkBlockSent(t, what);
    if (isBlocked() && !send) checkBlockReceive(t, what);
    if (isPointToPoint()) checkPointToPoint(send, t, what);
    if (isReduce() && send &&
        (t.bytes != send_.size() || std::memcmp(t.buf, partial(false).data(), t.bytes) != 0))
      finding("reduce sends other bytes than its partial result: " + what);
    trace("take %s\n", what.c_str());
    // Reading the whole buffer also lets ASan check that it is inside its allocation.
    posted_.push_back({send, t, std::vector<unsigned char>(b, b + t.bytes)});
  }

  void complete(size_t i) {
    Posted p = std::move(posted_[i]);
    if (i + 1 < posted_.size()) posted_[i] = std::move(posted_.back());
    posted_.pop_back();
    if (p.t.bytes && std::memcmp(p.t.buf, p.snapshot.data(), p.t.bytes) != 0)
      finding("buffer of a posted transfer written before its completion, step " +
              std::to_string(p.t.step));
    trace("%s step %d peer %d\n", p.send ? "sendDone" : "recvDone", p.t.step, p.t.peer);
    if (p.send) {
      algo_->sendDone(p.t.step);
      return;
    }
    auto buf = static_cast<unsigned char*>(p.t.buf);
    size_t bytes = p.t.bytes;
    if (isPointToPoint() && p.t.step == PointToPointChunk::kHeaderStep) {
      deliverHeader(p.t);
      return;
    }
    if (isAgreement() && !p.t.exact) {  // (halving-doubling's gathering rounds: data)
      bytes = deliverAgreement(p.t);
    } else {
      in_.fill(buf, bytes);
    }
    if (isBroadcast()) data_.assign(buf, buf + bytes);  // what this rank now holds and passes on
    if (isReduce()) childData_[p.t.step].assign(buf, buf + bytes);
    if (isBlocked()) blockArrived(p.t.step, buf, bytes);
    if (!p.t.exact) algo_->recvLength(p.t.step, bytes);
    algo_->recvDone(p.t.step);
  }

  // A point-to-point chunk posts its data (the user's buffer, the chunk's length) and, with a
  // total, one 8-byte header, in the same direction.
  void checkPointToPoint(bool send, const Transfer& t, const std::string& what) {
    if (send != isSend_ || t.peer != peer_)
      finding("point-to-point transfer the wrong way: " + what);
    if (!t.exact) finding("point-to-point transfer that accepts a shorter message: " + what);
    if (t.step == PointToPointChunk::kHeaderStep) {
      if (!total_ || t.bytes != sizeof(uint64_t)) finding("unexpected header transfer: " + what);
      if (send && std::memcmp(t.buf, &total_, sizeof total_) != 0)
        finding("header sent with another total than the op's: " + what);
      return;
    }
    const void* user = send ? spec_.send : spec_.recv;
    if (t.step != PointToPointChunk::kDataStep || t.buf != user || t.bytes != send_.size())
      finding("point-to-point data transfer not the chunk's buffer and length: " + what);
  }

  // The peer's header: by default the same total, or (input) any 8 bytes. A receive must refuse
  // a different total (the op then fails) and accept its own.
  void deliverHeader(const Transfer& t) {
    uint64_t total = total_;
    if (in_.byte() & 1) in_.fill(&total, sizeof total);
    std::memcpy(t.buf, &total, sizeof total);
    trace("  header says %llu\n", static_cast<unsigned long long>(total));
    try {
      algo_->recvDone(t.step);
    } catch (const prioccl::Error&) {
      if (total == total_) finding("point-to-point receive refused a header with its own total");
      refused_ = true;
      return;
    }
    if (total != total_) finding("point-to-point receive accepted a header with another total");
  }

  // A peer's agreement message: by default a well-formed one that agrees with ours; the input
  // may pick any length, raw bytes, a disagreement or one corrupted header byte.
  size_t deliverAgreement(const Transfer& t) {
    const uint8_t how = in_.byte();
    const size_t expected = kHeader + expectedPart(t.step);
    size_t bytes = std::min(t.bytes, expected);
    if (how & 3) bytes = in_.below(t.bytes + 1);
    auto buf = static_cast<unsigned char*>(t.buf);
    if (how & 4) {
      in_.fill(buf, bytes);
    } else {
      AgreementHeader h = valid_;
      h.rankA = t.peer;
      // Halving-doubling's messages carry parts of the data the header announces in full.
      h.payloadBytes = halving_ ? payload_ : bytes >= kHeader ? bytes - kHeader : 0;
      if (how & 8) h.a.count ^= 1 + in_.byte();  // the peer's group disagrees
      if (how & 16) {                            // ... or already found a disagreement
        h.mismatch = 1;
        h.rankB = in_.byte() % spec_.nranks;
      }
      if (how & 32) reinterpret_cast<unsigned char*>(&h)[in_.below(kHeader)] ^= 1 + in_.byte();
      std::memcpy(buf, &h, std::min(bytes, kHeader));
      if (bytes > kHeader) in_.fill(buf + kHeader, bytes - kHeader);
    }
    AgreementHeader got{};
    std::memcpy(&got, buf, std::min(bytes, kHeader));
    bool wellFormed = bytes >= kHeader && got.magic == valid_.magic &&
                      got.version == valid_.version &&
                      (halving_ ? got.payloadBytes == payload_ && bytes == expected
                                : got.payloadBytes == bytes - kHeader);
    trace(
        "  %zu of %zu bytes arrived: magic %#x version %u mismatch %u rankA %d payloadBytes "
        "%llu%s\n",
        bytes, t.bytes, got.magic, got.version, got.mismatch, got.rankA,
        static_cast<unsigned long long>(got.payloadBytes), wellFormed ? "" : " (malformed)");
    arrivals_.push_back({t.step, bytes, expected, wellFormed});
    return bytes;
  }

  // The data an agreeing peer's message carries at `step`: all of it, or with halving-doubling
  // on a scattering round, the half of this rank's range that it keeps (bit i of the virtual
  // rank picks the half in round i; the chunk is cut into p2 blocks, the first count % p2 one
  // element longer). Written from the algorithm's description, not from its code.
  size_t expectedPart(int step) const {
    const RdSchedule s(spec_.rank, spec_.nranks);
    if (!halving_ || step == 0 || step == s.lastStep()) return payload_;
    const size_t p2 = size_t{1} << s.rounds, elem = reduce::dtypeSize(spec_.dtype);
    const size_t base = spec_.count / p2, extra = spec_.count % p2;
    auto offset = [&](size_t block) { return (block * base + std::min(block, extra)) * elem; };
    size_t lo = 0, n = p2;
    for (int i = 0; i < step; ++i) {
      n /= 2;
      if ((s.vrank >> i) & 1) lo += n;
    }
    return offset(lo + n) - offset(lo);
  }

  // A short or malformed header must end in "not agreed", and data is reduced only when every
  // message carried exactly our payload. (A rank that sat the rounds out adopts its partner's
  // final header at its last step, so that one is trusted as long as it is complete.)
  void checkVerdict() {
    const RdSchedule sched(spec_.rank, spec_.nranks);
    bool malformed = false, exact = true;
    for (const Arrival& a : arrivals_) {
      const bool adopted = sched.sitsOut && a.step == sched.lastStep();
      if (a.bytes < kHeader || (!adopted && !a.wellFormed)) malformed = true;
      if (a.bytes != a.expected) exact = false;
    }
    const AgreementHeader verdict = agreement_->verdict();
    trace("verdict: magic %#x mismatch %u rankA %d rankB %d; agreed %d dataDone %d\n",
          verdict.magic, verdict.mismatch, verdict.rankA, verdict.rankB, agreement_->agreed(),
          agreement_->dataDone());
    if (malformed && agreement_->agreed())
      finding("agreed although a malformed agreement message arrived");
    if (agreement_->dataDone() && !exact) finding("data reduced from a message of the wrong size");
    if (verdict.magic != valid_.magic && agreement_->agreed()) finding("agreed without a header");
    if (!agreement_->dataDone())
      for (unsigned char b : recv_)
        if (b != 0xEE) finding("receive buffer written by an op it did not reduce");
  }

  // A broadcast passes on only what it holds: the root's data, or its parent's once received.
  void checkForwarded(const Transfer& t, const std::string& what) {
    if (data_.empty()) finding("forwarded before its data arrived: " + what);
    if (t.bytes != data_.size() || std::memcmp(t.buf, data_.data(), t.bytes) != 0)
      finding("forwards other bytes than it holds: " + what);
  }
  // ... and ends with them in the receive buffer.
  void checkBroadcast() {
    if (data_.size() != spec_.count * reduce::dtypeSize(spec_.dtype))
      finding("broadcast finished without its data");
    if (std::memcmp(spec_.recv, data_.data(), data_.size()) != 0)
      finding("broadcast's receive buffer differs from the data it got");
  }

  // A reduce's partial result: its own contribution reduced with every child's, in the children's
  // order (at the root, an Avg divides at the last); finding if a child's data is missing.
  std::vector<unsigned char> partial(bool atRoot) {
    std::vector<unsigned char> acc(contribution_);
    for (size_t c = 0; c < children_; ++c) {
      auto it = childData_.find(static_cast<int>(c));
      if (it == childData_.end())
        finding("reduce sent before child " + std::to_string(c) + "'s data arrived");
      int divisor = atRoot && c + 1 == children_ && spec_.op == priocclAvg ? spec_.nranks : 1;
      reduce::apply(acc.data(), it->second.data(), acc.data(), spec_.count, spec_.dtype, spec_.op,
                    divisor);
    }
    return acc;
  }

  // The blocked kinds' buffers: one block per rank, in a layout. Plain: every block `count`
  // elements, packed, the chunk at the blocks' start (the engine's plain path: no arrays). Uneven
  // (the v-variants): each block its own count, some shorter than the chunk or than `first` (an
  // empty slice), with gaps between blocks; the chunk starts `first` elements into each block.
  struct Layout {
    std::vector<size_t> counts, displs;  // elements (empty: plain)
    std::vector<size_t> at, bytes;       // this chunk's slice of each block: offset, length
    size_t extent = 0;                   // bytes of the buffer
  };
  Layout makeLayout(bool uneven, const std::vector<size_t>* sameOwn) {
    const size_t p = static_cast<size_t>(spec_.nranks), elem = reduce::dtypeSize(spec_.dtype);
    const size_t first = spec_.first, count = spec_.count;
    Layout l;
    size_t next = 0;
    for (size_t b = 0; b < p; ++b) {
      size_t n = uneven ? in_.below(first + count + 3) : count;
      if (sameOwn && b == static_cast<size_t>(spec_.rank)) n = (*sameOwn)[b];
      size_t d = uneven ? next + in_.below(3) : b * count;
      if (uneven) l.counts.push_back(n), l.displs.push_back(d);
      size_t slice = n > first ? std::min(count, n - first) : 0;
      l.at.push_back(slice ? (d + first) * elem : 0);
      l.bytes.push_back(slice * elem);
      next = d + n;
    }
    l.extent = (next + first + 1) * elem;  // the chunk's pointer stays inside the buffer
    return l;
  }
  BlockLayout blockLayout(const Layout& l) const {
    BlockLayout b;
    b.count = spec_.count;
    if (!l.counts.empty()) b.counts = l.counts.data(), b.displs = l.displs.data();
    return b;
  }
  void setUpBlocks(bool inPlace, bool uneven) {
    const size_t r = static_cast<size_t>(spec_.rank), elem = reduce::dtypeSize(spec_.dtype);
    spec_.first = uneven ? in_.byte() % 4 : 0;
    known_.assign(static_cast<size_t>(spec_.nranks), {});
    held_.assign(static_cast<size_t>(spec_.nranks), false);
    if (!isReduceScatter()) held_[r] = true;  // its own block
    if (isAllGather()) {
      recvL_ = makeLayout(uneven, nullptr);
      std::vector<unsigned char> own(send_.begin(), send_.begin() + recvL_.bytes[r]);
      send_ = own;  // this rank's slice: what the input made
      recv_.assign(recvL_.extent, 0xEE);
      if (inPlace && !own.empty()) std::memcpy(recv_.data() + recvL_.at[r], own.data(), own.size());
      spec_.recvBlocks = blockLayout(recvL_);
      spec_.recv = recv_.data() + spec_.first * elem;
      spec_.send = inPlace ? recv_.data() + recvL_.at[r] : send_.data();
      known_[r] = own;
      return;
    }
    sendL_ = makeLayout(uneven, nullptr);
    send_.resize(sendL_.extent);
    for (size_t i = 64; i < send_.size(); ++i) send_[i] = static_cast<unsigned char>(i * 97 + 5);
    contribution_ = send_;
    spec_.sendBlocks = blockLayout(sendL_);
    spec_.send = send_.data() + spec_.first * elem;
    if (isAllToAll()) {  // never in place; block r is this rank's own, sent and expected alike
      recvL_ = makeLayout(uneven, uneven ? &sendL_.counts : nullptr);
      recv_.assign(recvL_.extent, 0xEE);
      spec_.recvBlocks = blockLayout(recvL_);
      spec_.recv = recv_.data() + spec_.first * elem;
      known_[r].assign(contributionOf(static_cast<int>(r)),
                       contributionOf(static_cast<int>(r)) + sendL_.bytes[r]);
      return;
    }
    recv_.assign(sendL_.bytes[r], 0xEE);  // per step: the partial sum this rank holds after it
    spec_.recv = inPlace ? send_.data() + sendL_.at[r] : recv_.data();
  }
  int mod(int x) const { return ((x % spec_.nranks) + spec_.nranks) % spec_.nranks; }
  const unsigned char* contributionOf(int block) const {
    return contribution_.data() + sendL_.at[static_cast<size_t>(block)];
  }
  std::vector<unsigned char> contributionSlice(int block) const {
    return {contributionOf(block),
            contributionOf(block) + sendL_.bytes[static_cast<size_t>(block)]};
  }
  // What the send of step s must carry. All-gather: block r - s, known once it arrived (own at
  // s = 0). Reduce-scatter: the own contribution to block r - 1 at s = 0, then the partial sum
  // made at step s - 1.
  // Null when this rank does not hold it yet.
  const std::vector<unsigned char>* expectedSend(int s) {
    if (isAllGather()) {
      size_t b = static_cast<size_t>(mod(spec_.rank - s));
      return held_[b] ? &known_[b] : nullptr;
    }
    if (isAllToAll()) {  // step s: this rank's block for rank r + s + 1
      firstSend_ = contributionSlice(mod(spec_.rank + s + 1));
      return &firstSend_;
    }
    if (s == 0) {
      firstSend_ = contributionSlice(mod(spec_.rank - 1));
      return &firstSend_;
    }
    return held_[static_cast<size_t>(s - 1)] ? &known_[static_cast<size_t>(s - 1)] : nullptr;
  }
  void checkBlockSent(const Transfer& t, const std::string& what) {
    const std::vector<unsigned char>* want = expectedSend(t.step);
    if (!want) finding("forwards a block it does not hold yet: " + what);
    if (t.bytes != want->size() || (t.bytes && std::memcmp(t.buf, want->data(), t.bytes) != 0))
      finding("forwards other bytes than the block it holds: " + what);
  }
  // A receive must cover exactly its block's slice: in place for the all-gather and all-to-all,
  // a partial sum's length for the reduce-scatter.
  void checkBlockReceive(const Transfer& t, const std::string& what) {
    size_t block = static_cast<size_t>(mod(spec_.rank - t.step - (isReduceScatter() ? 2 : 1)));
    if (isReduceScatter()) {
      if (t.bytes != sendL_.bytes[block])
        finding("receives another length than the block: " + what);
      return;
    }
    if (t.bytes != recvL_.bytes[block] ||
        (t.bytes && static_cast<unsigned char*>(t.buf) != recv_.data() + recvL_.at[block]))
      finding("receives elsewhere than the block's slice: " + what);
  }
  void blockArrived(int step, const unsigned char* buf, size_t bytes) {
    std::vector<unsigned char> got(buf, buf + bytes);
    if (isAllToAll() || isAllGather()) {  // step s: rank r - s - 1's block
      size_t b = static_cast<size_t>(mod(spec_.rank - step - 1));
      known_[b] = got;
      held_[b] = true;
      return;
    }
    held_[static_cast<size_t>(step)] = true;
    const bool last = step == spec_.nranks - 2;
    const int divisor = last && spec_.op == priocclAvg ? spec_.nranks : 1;
    const size_t elem = reduce::dtypeSize(spec_.dtype);
    reduce::apply(got.data(), got.data(), contributionOf(mod(spec_.rank - step - 2)), bytes / elem,
                  spec_.dtype, spec_.op, divisor);
    known_[static_cast<size_t>(step)] = got;
  }
  void checkBlocksAtEnd() {
    if (isAllGather() || isAllToAll()) {
      std::vector<bool> inSlice(recv_.size(), false);
      for (size_t b = 0; b < known_.size(); ++b) {
        if (known_[b].size() != recvL_.bytes[b] ||
            (recvL_.bytes[b] &&
             std::memcmp(recv_.data() + recvL_.at[b], known_[b].data(), recvL_.bytes[b]) != 0))
          finding(std::string(kindName(kind_)) + "'s block " + std::to_string(b) +
                  " differs from what arrived");
        for (size_t i = 0; i < recvL_.bytes[b]; ++i) inSlice[recvL_.at[b] + i] = true;
      }
      for (size_t i = 0; i < recv_.size(); ++i)
        if (!inSlice[i] && recv_[i] != 0xEE)
          finding(std::string(kindName(kind_)) + " wrote its receive buffer outside its slices");
      return;
    }
    const size_t mine = sendL_.bytes[static_cast<size_t>(spec_.rank)];
    std::vector<unsigned char> want = contributionSlice(0);
    if (spec_.nranks > 1) want = known_[static_cast<size_t>(spec_.nranks - 2)];
    if (want.size() != mine || (mine && std::memcmp(spec_.recv, want.data(), mine) != 0))
      finding("reduce-scatter's result differs from the sum of what arrived and its contribution");
  }

  Script& in_;
  bool isAgreement() const { return kind_ == kinds() - 1; }
  bool isAllGather() const { return isAllGatherKind(kind_); }
  bool isReduceScatter() const { return isReduceScatterKind(kind_); }
  bool isAllToAll() const { return isAllToAllKind(kind_); }
  bool isBlocked() const { return isAllGather() || isReduceScatter() || isAllToAll(); }
  bool isReduce() const { return isReduceKind(kind_); }
  bool isBroadcast() const { return isBroadcastKind(kind_); }
  bool isPointToPoint() const { return isPointToPointKind(kind_); }

  size_t kind_ = 0;
  ChunkSpec spec_;
  prioccl::HostLayout layout_;  // the hierarchical all-reduce's hosts (spec_.hosts)
  std::vector<unsigned char> send_, recv_;
  std::unique_ptr<ScratchPool> pool_;  // declared before algo_: the chunk returns its blocks
  std::unique_ptr<ChunkAlgo> algo_;
  AgreementChunk* agreement_ = nullptr;
  Announce own_;
  AgreementHeader valid_;
  size_t payload_ = 0, maxPayload_ = 0;
  bool halving_ = false;
  int root_ = 0;  // broadcast
  // Point to point: the direction, the peer, the op's total (0: no header), a refused header.
  bool isSend_ = false, refused_ = false;
  int peer_ = 0;
  uint64_t total_ = 0;
  RootTree::Shape shape_ = RootTree::Shape::kChain;
  std::vector<unsigned char> data_;  // broadcast: the data this rank holds (empty: none yet)
  size_t children_ = 0;              // broadcast, reduce: this rank's children in the tree
  std::map<int, std::vector<unsigned char>> childData_;  // reduce: what each child sent
  std::vector<unsigned char> contribution_;  // reduce, reduce-scatter, all-to-all: the input
  Layout sendL_, recvL_;                     // the blocked kinds' layouts
  // All-gather, all-to-all: which blocks arrived (or are this rank's); reduce-scatter: which
  // steps' partial sums are made. (A block may be empty: known_ alone cannot tell.)
  std::vector<bool> held_;
  // All-gather: each block as this rank knows it; reduce-scatter: its partial sum after each step.
  std::vector<std::vector<unsigned char>> known_;
  std::vector<unsigned char> firstSend_;
  std::vector<Posted> posted_;
  std::set<std::tuple<bool, int, int>> tags_;
  std::vector<Arrival> arrivals_;
};

// Seed inputs for every algorithm and a few rank counts: all-zero scripts, i.e. the engine's
// plain path (first ready transfer first, well-formed agreeing messages).
void writeSeeds(const char* dir) {
  int n = 0;
  for (size_t kind = 0; kind < kinds(); ++kind)
    for (int p : {2, 3, 5, 8})
      // 10: carried on halving-doubling, broadcast: binomial; 16, 17: blocks of uneven lengths
      for (int flags : {0, 1, 2, 10, 16, 17}) {
        std::vector<uint8_t> seed(512, 0);
        const uint8_t head[] = {static_cast<uint8_t>(kind),
                                static_cast<uint8_t>(p - 1),
                                static_cast<uint8_t>(p / 2),
                                6,
                                0,
                                static_cast<uint8_t>(flags),
                                7,
                                0};
        std::memcpy(seed.data(), head, sizeof head);
        std::string path = std::string(dir) + "/seed-" + std::to_string(n++);
        if (FILE* f = std::fopen(path.c_str(), "wb")) {
          std::fwrite(seed.data(), 1, seed.size(), f);
          std::fclose(f);
        }
      }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("PRIOCCL_FUZZ_SEEDS")) writeSeeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Script script(data, size);
  Run(script).go();
  return 0;
}
