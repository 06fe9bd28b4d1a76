#include "algo/point_to_point.h"

#include "common/error.h"
#include "reduce/reduce.h"

namespace prioccl {

PointToPointChunk::PointToPointChunk(const ChunkSpec& spec, int peer, bool isSend,
                                     uint64_t totalBytes)
    : peer_(peer),
      rank_(spec.rank),
      transfers_(totalBytes ? 2 : 1),
      isSend_(isSend),
      total_(totalBytes),
      header_(isSend ? totalBytes : 0) {
  data_.peer = peer;
  data_.step = kDataStep;
  // A send only reads its buffer; the transport's interface takes one pointer type for both.
  data_.buf = isSend ? const_cast<void*>(spec.send) : spec.recv;
  data_.bytes = spec.count * reduce::dtypeSize(spec.dtype);
  data_.exact = true;  // sender and receiver cut alike only when they agree on the size
}

// The header first: on a receiver it is the check that ends a mismatched op promptly.
Transfer PointToPointChunk::take() {
  if (posted_++ == 0 && transfers_ == 2) {
    Transfer header;
    header.peer = peer_;
    header.step = kHeaderStep;
    header.buf = &header_;
    header.bytes = sizeof header_;
    header.exact = true;
    return header;
  }
  return data_;
}

void PointToPointChunk::recvDone(int step) {
  ++done_;
  if (step != kHeaderStep || header_ == total_) return;
  detail::fail(priocclRemoteError, "point-to-point size mismatch: rank ", peer_, " sends ", header_,
               " bytes to rank ", rank_, ", whose receive expects ", total_,
               " bytes: the ranks disagree on the count or datatype of the op");
}

}  // namespace prioccl
