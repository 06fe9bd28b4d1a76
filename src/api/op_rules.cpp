#include "api/op_rules.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/error.h"
#include "reduce/reduce.h"

namespace prioccl::detail {

void validateEnums(const priocclDataType_t& dtype, const priocclRedOp_t& op) {
  if (!reduce::isValidDtype(enumBits(dtype)))
    fail(priocclInvalidArgument, "invalid datatype ", enumBits(dtype));
  if (!reduce::isValidOp(enumBits(op)))
    fail(priocclInvalidArgument, "invalid reduction op ", enumBits(op));
}

namespace {
// What every op has: its kind, buffers, enums and priority. The enums are copied as bytes: from the
// C ABI they may hold any value until validateEnums has read them, and loading such a value as an
// enum is undefined (UBSan's enum check).
OpDesc opOf(OpState::Kind kind, const void* send, void* recv, const priocclDataType_t& dtype,
            const priocclRedOp_t& op, int priority) {
  OpDesc d;
  d.kind = kind;
  d.send = send;
  d.recv = recv;
  std::memcpy(&d.dtype, &dtype, sizeof dtype);
  std::memcpy(&d.op, &op, sizeof op);
  d.priority = priority;
  return d;
}
}  // namespace

OpDesc collectiveOp(OpState::Kind kind, const void* send, void* recv, size_t count,
                    const priocclDataType_t& dtype, const priocclRedOp_t& op, int root,
                    int priority) {
  OpDesc d = opOf(kind, send, recv, dtype, op, priority);
  d.count = count;
  d.root = root;
  return d;
}

OpDesc collectiveVOp(OpState::Kind kind, const void* send, void* recv, const size_t* sendCounts,
                     const size_t* sendDispls, const size_t* recvCounts, const size_t* recvDispls,
                     const priocclDataType_t& dtype, const priocclRedOp_t& op, int priority) {
  OpDesc d = opOf(kind, send, recv, dtype, op, priority);
  d.sendCounts = sendCounts;
  d.sendDispls = sendDispls;
  d.recvCounts = recvCounts;
  d.recvDispls = recvDispls;
  return d;
}

OpDesc rowsOp(OpState::Kind kind, const void* send, size_t rows, const size_t* sendRows,
              size_t rowCount, const priocclDataType_t& dtype, int priority) {
  OpDesc d = opOf(kind, send, nullptr, dtype, priocclSum, priority);
  d.count = rows;
  d.sendCounts = sendRows;
  d.rowCount = rowCount;
  return d;
}

OpDesc pointToPointOp(OpState::Kind kind, const void* buf, size_t count,
                      const priocclDataType_t& dtype, int peer, int tag, int priority) {
  const priocclRedOp_t none = priocclSum;
  // recv: written by a receive only; a send's caller gave the buffer const.
  OpDesc d = opOf(kind, buf, const_cast<void*>(buf), dtype, none, priority);
  d.count = count;
  d.peer = peer;
  d.tag = tag;
  return d;
}

OpFamily familyOf(OpState::Kind kind) {
  using Kind = OpState::Kind;
  switch (kind) {
    case Kind::kAllGatherV:
    case Kind::kReduceScatterV:
    case Kind::kAllToAllV:
      return OpFamily::kCollectiveV;
    case Kind::kSend:
    case Kind::kRecv:
      return OpFamily::kPointToPoint;
    default:
      return OpFamily::kCollective;
  }
}

void checkPointToPoint(const OpDesc& d, int rank, int size) {
  const char* what = d.kind == OpState::Kind::kSend ? "send" : "recv";
  const size_t elem = reduce::dtypeSize(d.dtype);
  if (d.count > SIZE_MAX / elem)
    fail(priocclInvalidArgument, what, ": count ", d.count, " overflows the address space");
  if (d.count > 0 && !d.send)
    fail(priocclInvalidArgument, what, ": buf is null with count ", d.count);
  if (d.peer < 0 || d.peer >= size || d.peer == rank)
    fail(priocclInvalidArgument, what, ": peer ", d.peer, " is not another rank (this is rank ",
         rank, " of ", size, ")");
}

CollectiveExtents checkCollective(const OpDesc& a, int rank, int size) {
  using Kind = OpState::Kind;
  const Kind kind = a.kind;
  const bool broadcast = kind == Kind::kBroadcast, reduceOp = kind == Kind::kReduce;
  const bool rooted = broadcast || reduceOp;
  const std::string what = kind == Kind::kAllReduce ? "" : concat(kindName(kind), ": ");
  const size_t elem = reduce::dtypeSize(a.dtype);
  // Elements of the send and receive buffers: count, or count per rank in the blocked one.
  const size_t blocks =
      kind == Kind::kAllGather || kind == Kind::kReduceScatter || kind == Kind::kAllToAll
          ? static_cast<size_t>(size)
          : 1;
  if (a.count > SIZE_MAX / elem / blocks)
    fail(priocclInvalidArgument, what, "count ", a.count, " of ", reduce::dtypeName(a.dtype),
         blocks > 1 ? concat(" per rank (", blocks, " ranks)") : std::string(),
         " overflows the address space");
  const size_t bytes = a.count * elem;
  const size_t sendBytes = kind == Kind::kAllGather ? bytes : bytes * blocks;
  const size_t recvBytes = kind == Kind::kReduceScatter ? bytes : bytes * blocks;
  if (rooted && (a.root < 0 || a.root >= size))
    fail(priocclInvalidArgument, what, "root ", a.root, " is not a rank of this communicator (",
         size, " ranks)");
  const bool reads = !broadcast || rank == a.root, writes = !reduceOp || rank == a.root;
  const void* send = reads ? a.send : nullptr;
  void* recv = writes ? a.recv : nullptr;
  const char* onRoot = rooted ? " on the root" : "";
  if (a.count > 0 && writes && !recv)
    fail(priocclInvalidArgument, what, "recvbuf is null with count ", a.count,
         reduceOp ? onRoot : "");
  if (a.count > 0 && reads && !send)
    fail(priocclInvalidArgument, what, "sendbuf is null with count ", a.count,
         broadcast ? onRoot : "");
  auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  const size_t ownBlock = static_cast<size_t>(rank) * bytes;
  const bool inPlace = kind == Kind::kAllGather       ? s == r + ownBlock
                       : kind == Kind::kReduceScatter ? r == s + ownBlock
                       : kind == Kind::kAllToAll      ? false
                                                      : s == r;
  if (a.count > 0 && reads && writes && !inPlace && s < r + recvBytes && r < s + sendBytes)
    fail(priocclInvalidArgument, what, "sendbuf and recvbuf overlap without being in place (",
         kind == Kind::kAllGather       ? "sendbuf at this rank's block of recvbuf"
         : kind == Kind::kReduceScatter ? "recvbuf at this rank's block of sendbuf"
         : kind == Kind::kAllToAll      ? "an all-to-all is never in place"
                                        : "the same pointer",
         ")");
  return {send, recv, reads ? sendBytes : 0, writes ? recvBytes : 0, rooted ? a.root : -1};
}

namespace {

// A v-collective's layout from the caller's arrays (`what`: the collective, for messages): copies
// `counts` and `displs` (null: packed) for `p` ranks; returns the elements it spans.
size_t layoutOf(const std::string& what, priocclDataType_t dtype, size_t p, const char* countsName,
                const size_t* counts, const char* displsName, const size_t* displs,
                std::vector<size_t>& outCounts, std::vector<size_t>& outDispls) {
  const size_t elem = reduce::dtypeSize(dtype);
  if (!counts) fail(priocclInvalidArgument, what, countsName, " is null");
  outCounts.assign(counts, counts + p);
  outDispls.resize(p);
  size_t extent = 0, next = 0;
  for (size_t b = 0; b < p; ++b) {
    size_t d = displs ? displs[b] : next;
    if (counts[b] > SIZE_MAX / elem || d > SIZE_MAX / elem - counts[b])
      fail(priocclInvalidArgument, what, countsName, "[", b, "] = ", counts[b], " from ",
           displs ? displsName : "packed displacement ", displs ? concat("[", b, "] = ") : "", d,
           " of ", reduce::dtypeName(dtype), " overflows the address space");
    outDispls[b] = d;
    next = d + counts[b];
    extent = std::max(extent, next);
  }
  return extent;
}

// Blocks that are written must not overlap one another.
void requireDisjoint(const std::string& what, const char* name, const std::vector<size_t>& counts,
                     const std::vector<size_t>& displs) {
  std::vector<size_t> order(counts.size());
  for (size_t b = 0; b < order.size(); ++b) order[b] = b;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return displs[x] < displs[y]; });
  size_t end = 0, endBlock = 0;
  for (size_t b : order) {
    if (counts[b] == 0) continue;
    if (displs[b] < end)
      fail(priocclInvalidArgument, what, "blocks ", endBlock, " and ", b, " of ", name,
           " overlap (each rank's block must have a place of its own)");
    end = displs[b] + counts[b];
    endBlock = b;
  }
}

}  // namespace

CollectiveVLayout checkCollectiveV(const OpDesc& a, int rank, int size) {
  using Kind = OpState::Kind;
  const Kind kind = a.kind;
  const std::string what = concat(kindName(kind), ": ");
  const size_t elem = reduce::dtypeSize(a.dtype), p = static_cast<size_t>(size);
  const size_t me = static_cast<size_t>(rank);
  CollectiveVLayout v;
  if (kind == Kind::kAllGatherV) {
    v.recvElems = layoutOf(what, a.dtype, p, "recvcounts", a.recvCounts, "displs", a.recvDispls,
                           v.recvCounts, v.recvDispls);
    requireDisjoint(what, "recvbuf", v.recvCounts, v.recvDispls);
    v.sendElems = v.recvCounts[me];
  } else if (kind == Kind::kReduceScatterV) {
    v.sendElems = layoutOf(what, a.dtype, p, "recvcounts", a.recvCounts, "", nullptr, v.sendCounts,
                           v.sendDispls);
    v.recvElems = v.sendCounts[me];
  } else {
    v.sendElems = layoutOf(what, a.dtype, p, "sendcounts", a.sendCounts, "sdispls", a.sendDispls,
                           v.sendCounts, v.sendDispls);
    v.recvElems = layoutOf(what, a.dtype, p, "recvcounts", a.recvCounts, "rdispls", a.recvDispls,
                           v.recvCounts, v.recvDispls);
    requireDisjoint(what, "recvbuf", v.recvCounts, v.recvDispls);
    if (v.sendCounts[me] != v.recvCounts[me])
      fail(priocclInvalidArgument, what, "sendcounts[", me, "] = ", v.sendCounts[me],
           " but recvcounts[", me, "] = ", v.recvCounts[me],
           ": what this rank sends itself must be what it expects from itself");
  }
  const std::vector<size_t>& shared = kind == Kind::kAllGatherV ? v.recvCounts : v.sendCounts;
  for (size_t c : shared) v.largest = std::max(v.largest, c);
  if (kind == Kind::kAllToAllV)
    for (size_t c : v.recvCounts) v.largest = std::max(v.largest, c);
  if (v.sendElems > 0 && !a.send)
    fail(priocclInvalidArgument, what, "sendbuf is null with ", v.sendElems, " elements to send");
  if (v.recvElems > 0 && !a.recv)
    fail(priocclInvalidArgument, what, "recvbuf is null with ", v.recvElems,
         " elements to receive");
  auto s = reinterpret_cast<uintptr_t>(a.send), r = reinterpret_cast<uintptr_t>(a.recv);
  const bool inPlace = kind == Kind::kAllGatherV       ? s == r + v.recvDispls[me] * elem
                       : kind == Kind::kReduceScatterV ? r == s + v.sendDispls[me] * elem
                                                       : false;
  if (v.sendElems > 0 && v.recvElems > 0 && !inPlace && s < r + v.recvElems * elem &&
      r < s + v.sendElems * elem)
    fail(priocclInvalidArgument, what, "sendbuf and recvbuf overlap without being in place (",
         kind == Kind::kAllGatherV       ? "sendbuf at displs[rank] of recvbuf"
         : kind == Kind::kReduceScatterV ? "recvbuf at this rank's block of sendbuf"
                                         : "an all-to-all is never in place",
         ")");
  return v;
}

}  // namespace prioccl::detail
