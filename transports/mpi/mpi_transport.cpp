// MPI transport: MPI_Isend/MPI_Issend/MPI_Irecv on a private communicator, completions via
// MPI_Testsome.
#include "mpi/mpi_transport.h"

#include <climits>

#include "common/error.h"
#include "common/log.h"
#include "mpi/mpi_bootstrap.h"  // mpiErrorString

namespace prioccl {

using detail::concat;
using detail::fail;

MpiTransport::MpiTransport(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  int* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &flag);
  long long tagUb = flag && ub ? *ub : 32767;  // the standard guarantees at least 32767
  tagSpace_ = static_cast<uint64_t>(tagUb) + 1;
}

// A communicator that failed (or stopped without every peer's goodbye) may still have messages
// on their way to it. Open MPI hands such messages to the next communicator that gets the same
// context id, where they would be matched in place of real ones; so it is left allocated (a few
// hundred bytes) instead of freed.
MpiTransport::~MpiTransport() {
  withdraw();  // a clean stop leaves only the standing control receives, which nothing matches
  if (!abandoned_) MPI_Comm_free(&comm_);
}

void MpiTransport::post(bool isRecv, int peer, uint64_t tag, void* buf, size_t bytes,
                        uint64_t cookie, bool sync, bool delivered) {
  if (bytes > static_cast<size_t>(INT_MAX))
    fail(priocclInternalError, "transfer of ", bytes, " bytes exceeds MPI's int count");
  MPI_Request req = MPI_REQUEST_NULL;
  int mpiTag = static_cast<int>(tag % tagSpace_);
  int count = static_cast<int>(bytes);
  int rc = isRecv ? MPI_Irecv(buf, count, MPI_BYTE, peer, mpiTag, comm_, &req)
           : sync ? MPI_Issend(buf, count, MPI_BYTE, peer, mpiTag, comm_, &req)
                  : MPI_Isend(buf, count, MPI_BYTE, peer, mpiTag, comm_, &req);
  if (rc != MPI_SUCCESS)
    fail(priocclSystemError,
         isRecv ? "MPI_Irecv from rank " : (sync ? "MPI_Issend to rank " : "MPI_Isend to rank "),
         peer, " failed: ", mpiErrorString(rc));
  reqs_.push_back(req);
  posted_.push_back({cookie, peer, bytes, isRecv, delivered});
}

void MpiTransport::postSend(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t cookie,
                            SendCompletion completion) {
  // End-to-end credit (transport.h). Open MPI completes an eager send (over TCP: up to
  // btl_tcp_eager_limit, 64 KiB by default) as soon as it has copied the bytes into its own
  // fragment queue or the kernel's socket buffer, which autotunes up to 4 MiB; everything queued
  // there is beyond the scheduler's reach, and the engine's credit, which counts a send until it
  // completes, would bound nothing (4 hosts at 1 Gbit/s: a 1 MiB urgent op slowed 17x by a 64 MiB
  // op under way). A synchronous-mode send completes only once the receiver has matched it, i.e.
  // once its bytes crossed the wire. On shared memory with 4 ranks it changed no busbw from 8 KiB
  // to 64 MiB.
  // kDelivered (an abort notice): synchronous at any size, so that the failing rank knows the
  // peer has it.
  bool delivered = completion == SendCompletion::kDelivered;
  bool sync = completesAtReceiver(completion, bytes);
  post(false, peer, tag, const_cast<void*>(buf), bytes, cookie, sync, delivered);
}

void MpiTransport::postRecv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie) {
  post(true, peer, tag, buf, bytes, cookie, false);
}

size_t MpiTransport::poll(std::vector<Completion>& out) {
  if (reqs_.empty()) return 0;
  indices_.resize(reqs_.size());
  statuses_.resize(reqs_.size());
  int done = 0;
  int rc = MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &done, indices_.data(),
                        statuses_.data());
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
    Completion c;
    c.ok = false;
    c.code = priocclSystemError;
    c.error = concat("MPI_Testsome failed: ", mpiErrorString(rc));
    out.push_back(c);
    return 1;
  }
  if (done == MPI_UNDEFINED || done == 0) return 0;
  for (int i = 0; i < done; ++i) {
    const Posted& p = posted_[indices_[i]];
    const MPI_Status& st = statuses_[i];
    Completion c;
    c.cookie = p.cookie;
    int err = rc == MPI_ERR_IN_STATUS ? st.MPI_ERROR : MPI_SUCCESS;
    if (err != MPI_SUCCESS) {
      c.ok = false;
      c.code = err == MPI_ERR_TRUNCATE ? priocclRemoteError : priocclSystemError;
      // Anything but a truncation (which this rank's receive found) is the connection to the
      // peer failing: the peer died, or failed the communicator and tore down after saying why.
      c.peerLost = err != MPI_ERR_TRUNCATE;
      c.error = concat(p.isRecv ? "receive from rank " : "send to rank ", p.peer,
                       " failed: ", mpiErrorString(err));
      if (err == MPI_ERR_TRUNCATE)
        c.error +=
            " (ranks disagree on the count or datatype of an op, or submitted different ops)";
    } else if (p.isRecv) {
      int got = 0;
      MPI_Get_count(&st, MPI_BYTE, &got);
      c.bytes = static_cast<size_t>(got);
    }
    out.push_back(std::move(c));
  }
  // Compact: drop the finished requests.
  finished_.assign(reqs_.size(), 0);
  for (int i = 0; i < done; ++i) finished_[indices_[i]] = 1;
  size_t keep = 0;
  for (size_t i = 0; i < reqs_.size(); ++i) {
    if (finished_[i]) continue;
    reqs_[keep] = reqs_[i];
    posted_[keep] = posted_[i];
    ++keep;
  }
  reqs_.resize(keep);
  posted_.resize(keep);
  return static_cast<size_t>(done);
}

// Receives can be withdrawn; a send's buffer may still be read by MPI after this (see the
// reliability work: the communicator is unusable once anything fails).
void MpiTransport::cancelAll() {
  abandoned_ = true;
  withdraw();
}

void MpiTransport::withdraw() {
  for (size_t i = 0; i < reqs_.size(); ++i) {
    MPI_Request& req = reqs_[i];
    if (req == MPI_REQUEST_NULL) continue;
    if (!posted_[i].delivered) MPI_Cancel(&req);
    MPI_Request_free(&req);
  }
  reqs_.clear();
  posted_.clear();
}

}  // namespace prioccl
