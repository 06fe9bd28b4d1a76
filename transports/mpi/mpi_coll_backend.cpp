// MPI non-blocking collectives as a collective backend (coll_backend.h). Built-in datatypes and
// ops where MPI has them, so that results are bitwise MPI_Allreduce's; user-defined ops running
// prioccl's own kernels where MPI has no type (the 16-bit floats, as 16-bit words) or where its
// semantics differ from the library's (float Min/Max with NaNs: prioccl's return the NaN, MPI's
// are the implementation's; 8-bit integer sums and products wrap in prioccl, while Open MPI
// 4.1.4's AVX op component saturates 8-bit sums of 16 or more elements: -128 + -27 + 74 gives
// -54, not -81), so a program sees the same results over every transport.
#include "mpi/mpi_coll_backend.h"

#include <climits>
#include <cstring>

#include "common/error.h"
#include "mpi/mpi_bootstrap.h"  // mpiErrorString
#include "reduce/reduce.h"

namespace prioccl {

using detail::fail;

namespace {

MPI_Datatype mpiType(priocclDataType_t dt) {
  switch (dt) {
    case priocclInt8:
      return MPI_INT8_T;
    case priocclUint8:
      return MPI_UINT8_T;
    case priocclInt32:
      return MPI_INT32_T;
    case priocclUint32:
      return MPI_UINT32_T;
    case priocclInt64:
      return MPI_INT64_T;
    case priocclUint64:
      return MPI_UINT64_T;
    case priocclFloat32:
      return MPI_FLOAT;
    case priocclFloat64:
      return MPI_DOUBLE;
    case priocclFloat16:
    case priocclBfloat16:
      return MPI_UINT16_T;  // reduced by a user op
    case priocclNumTypes:
      break;
  }
  fail(priocclInvalidArgument, "mpi-coll: datatype ", static_cast<int>(dt), " is not one");
}

// inout = in op inout, by prioccl's kernel (in first, as the library's Min/Max tie rule says).
template <priocclDataType_t D, priocclRedOp_t O>
void userOp(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce::apply(inout, in, inout, static_cast<size_t>(*len), D, O, 1);
}

using UserFn = void (*)(void*, void*, int*, MPI_Datatype*);
template <priocclDataType_t D>
constexpr UserFn kRow[4] = {userOp<D, priocclSum>, userOp<D, priocclProd>, userOp<D, priocclMax>,
                            userOp<D, priocclMin>};
// Rows: float16, bfloat16, float32, float64, int8, uint8; columns: sum, prod, max, min.
constexpr const UserFn* kUserOps[6] = {kRow<priocclFloat16>, kRow<priocclBfloat16>,
                                       kRow<priocclFloat32>, kRow<priocclFloat64>,
                                       kRow<priocclInt8>,    kRow<priocclUint8>};

// The user-op row of a type (-1: MPI's built-ins for every op).
int userRow(priocclDataType_t dt) {
  switch (dt) {
    case priocclFloat16:
      return 0;
    case priocclBfloat16:
      return 1;
    case priocclFloat32:
      return 2;
    case priocclFloat64:
      return 3;
    case priocclInt8:
      return 4;
    case priocclUint8:
      return 5;
    default:
      return -1;
  }
}

// Where prioccl's kernel replaces MPI's built-in op: every op of the 16-bit floats (MPI has no
// such type), Min/Max of the other floats, Sum/Prod (and so Avg) of the 8-bit integers.
bool userOpFor(int row, int column) {
  if (row < 0) return false;
  if (row <= 1) return true;
  if (row <= 3) return column >= 2;
  return column < 2;
}

const char* kindName(CollKind k) {
  switch (k) {
    case CollKind::kAllReduce:
      return "MPI_Iallreduce";
    case CollKind::kBroadcast:
      return "MPI_Ibcast";
    case CollKind::kReduce:
      return "MPI_Ireduce";
    case CollKind::kAllGather:
      return "MPI_Iallgather";
    case CollKind::kReduceScatter:
      return "MPI_Ireduce_scatter_block";
    case CollKind::kAllToAll:
      return "MPI_Ialltoall";
    case CollKind::kBarrier:
      return "MPI_Ibarrier";
  }
  return "an MPI collective";
}

}  // namespace

MpiCollBackend::MpiCollBackend(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  for (auto& row : userOps_)
    for (MPI_Op& op : row) op = MPI_OP_NULL;
}

// As MpiTransport's: a communicator abandoned with collectives in flight is left allocated.
MpiCollBackend::~MpiCollBackend() {
  if (abandoned_) return;
  for (auto& row : userOps_)
    for (MPI_Op& op : row)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
  MPI_Comm_free(&comm_);
}

MPI_Op MpiCollBackend::mpiOp(priocclDataType_t dt, priocclRedOp_t op) {
  int column = op == priocclProd ? 1 : op == priocclMax ? 2 : op == priocclMin ? 3 : 0;
  int row = userRow(dt);
  if (userOpFor(row, column)) {
    MPI_Op& user = userOps_[row][column];
    if (user == MPI_OP_NULL) {
      // Min/Max pick an operand, and on ties (+0/-0) or NaNs which one depends on the order: not
      // commutative bit for bit, so MPI must combine in rank order and every rank gets the same
      // bits. Sum and Prod (computed, not picked) are.
      int commute = column < 2 ? 1 : 0;
      int rc = MPI_Op_create(kUserOps[row][column], commute, &user);
      if (rc != MPI_SUCCESS)
        fail(priocclSystemError, "mpi-coll: MPI_Op_create failed: ", mpiErrorString(rc));
    }
    return user;
  }
  static const MPI_Op kBuiltIn[4] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
  return kBuiltIn[column];  // Avg: a sum, divided on completion
}

void MpiCollBackend::launch(const CollLaunch& c, uint64_t cookie) {
  if (c.stride != c.count)
    fail(priocclInternalError, "mpi-coll: a slice of a blocked collective (count ", c.count,
         ", stride ", c.stride, ") is not supported");
  if (c.count > static_cast<size_t>(INT_MAX))
    fail(priocclInvalidArgument, "mpi-coll: ", kindName(c.kind), " of ", c.count,
         " elements exceeds MPI's int count");
  const int n = static_cast<int>(c.count);
  const size_t elem = reduce::dtypeSize(c.dtype);
  MPI_Datatype t = c.kind == CollKind::kBarrier ? MPI_BYTE : mpiType(c.dtype);
  MPI_Request req = MPI_REQUEST_NULL;
  const void* send = c.send;
  void* recv = c.recv;
  int rc = MPI_SUCCESS;
  switch (c.kind) {
    case CollKind::kAllReduce:
      rc = MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, n, t, mpiOp(c.dtype, c.op),
                          comm_, &req);
      break;
    case CollKind::kBroadcast:  // the root sends from recvbuf (its data copied there first)
      if (rank_ == c.root && send != recv && n > 0) std::memcpy(recv, send, c.count * elem);
      rc = MPI_Ibcast(recv, n, t, c.root, comm_, &req);
      break;
    case CollKind::kReduce:
      rc = MPI_Ireduce(rank_ == c.root && send == recv ? MPI_IN_PLACE : send, recv, n, t,
                       mpiOp(c.dtype, c.op), c.root, comm_, &req);
      break;
    case CollKind::kAllGather: {
      auto* own = static_cast<char*>(recv) + static_cast<size_t>(rank_) * c.count * elem;
      rc = MPI_Iallgather(send == own ? MPI_IN_PLACE : send, n, t, recv, n, t, comm_, &req);
      break;
    }
    case CollKind::kReduceScatter: {
      // In place (recvbuf at this rank's block of sendbuf) is not MPI's MPI_IN_PLACE layout;
      // MPI forbids the aliasing, so the caller passes such ops through a copy (see runner).
      rc = MPI_Ireduce_scatter_block(send, recv, n, t, mpiOp(c.dtype, c.op), comm_, &req);
      break;
    }
    case CollKind::kAllToAll:
      rc = MPI_Ialltoall(send, n, t, recv, n, t, comm_, &req);
      break;
    case CollKind::kBarrier:
      rc = MPI_Ibarrier(comm_, &req);
      break;
  }
  if (rc != MPI_SUCCESS)
    fail(priocclSystemError, "mpi-coll: ", kindName(c.kind), " failed: ", mpiErrorString(rc));
  reqs_.push_back(req);
  launched_.push_back({cookie, c, c.op == priocclAvg});
}

size_t MpiCollBackend::poll(std::vector<Completion>& out) {
  if (reqs_.empty()) return 0;
  int done = 0;
  indices_.resize(reqs_.size());
  int rc = MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &done, indices_.data(),
                        MPI_STATUSES_IGNORE);
  if (rc != MPI_SUCCESS)
    fail(priocclSystemError, "mpi-coll: MPI_Testsome failed: ", mpiErrorString(rc));
  if (done == MPI_UNDEFINED || done == 0) return 0;
  size_t before = out.size();
  for (int i = 0; i < done; ++i) {
    Launched& l = launched_[static_cast<size_t>(indices_[static_cast<size_t>(i)])];
    if (l.average) {
      const CollLaunch& c = l.c;
      bool writes = c.kind != CollKind::kReduce || rank_ == c.root;
      if (writes) reduce::divide(c.recv, c.count, c.dtype, size_);
    }
    Completion done1;
    done1.cookie = l.cookie;
    out.push_back(done1);
  }
  // Compact: MPI_Testsome set the finished requests to MPI_REQUEST_NULL.
  size_t keep = 0;
  for (size_t i = 0; i < reqs_.size(); ++i) {
    if (reqs_[i] == MPI_REQUEST_NULL) continue;
    reqs_[keep] = reqs_[i];
    launched_[keep] = launched_[i];
    ++keep;
  }
  reqs_.resize(keep);
  launched_.resize(keep);
  return out.size() - before;
}

void MpiCollBackend::abandon() {
  // MPI cannot cancel a collective: its requests are dropped, and the communicator (which a
  // late message could still reach) is never freed.
  abandoned_ = true;
  reqs_.clear();
  launched_.clear();
}

}  // namespace prioccl
