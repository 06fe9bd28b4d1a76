#include "algo/point_to_point.h"

#include "reduce/reduce.h"

namespace prioccl {

PointToPointChunk::PointToPointChunk(const ChunkSpec& spec, int peer, bool isSend)
    : isSend_(isSend) {
  transfer_.peer = peer;
  transfer_.step = 0;
  // A send only reads its buffer; the transport's interface takes one pointer type for both.
  transfer_.buf = isSend ? const_cast<void*>(spec.send) : spec.recv;
  transfer_.bytes = spec.count * reduce::dtypeSize(spec.dtype);
  transfer_.exact = true;  // sender and receiver cut alike only when they agree on the size
}

Transfer PointToPointChunk::takeSend() {
  posted_ = true;
  return transfer_;
}

Transfer PointToPointChunk::takeRecv() {
  posted_ = true;
  return transfer_;
}

}  // namespace prioccl
