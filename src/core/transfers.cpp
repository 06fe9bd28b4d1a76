#include "core/transfers.h"

#include "common/error.h"

namespace prioccl::detail {

Transfers::Transfers(Transport& transport, uint64_t controlTag, std::vector<int> controlPeers,
                     size_t controlBytes, bool stampStart)
    : transport_(transport),
      controlTag_(controlTag),
      controlPeers_(std::move(controlPeers)),
      controlBytes_(controlBytes),
      stampStart_(stampStart),
      controlRecv_(controlPeers_.size(), std::vector<unsigned char>(controlBytes)) {}

uint64_t Transfers::post(Kind kind, int peer, uint64_t tag, void* buf, size_t bytes,
                         SendCompletion completion) {
  uint64_t cookie;
  if (free_.empty()) {
    cookie = posted_.size();
    posted_.push_back({});
  } else {
    cookie = free_.back();
    free_.pop_back();
  }
  posted_[cookie] = {
      kind, 0, true, peer, 0, 0, 0, bytes, stampStart_ ? Clock::now() : Clock::time_point()};
  if (kind == Kind::kDataRecv || kind == Kind::kControlRecv)
    transport_.postRecv(peer, tag, buf, bytes, cookie);
  else
    transport_.postSend(peer, tag, buf, bytes, cookie, completion);
  return cookie;
}

void Transfers::postControlReceives() {
  for (size_t i = 0; i < controlPeers_.size(); ++i) repostControlReceive(i);
}

void Transfers::repostControlReceive(size_t i) {
  uint64_t cookie = post(Kind::kControlRecv, controlPeers_[i], controlTag_, controlRecv_[i].data(),
                         controlBytes_);
  posted_[cookie].step = static_cast<int>(i);
}

uint64_t Transfers::sendControl(int peer, std::vector<unsigned char> bytes,
                                SendCompletion completion) {
  uint64_t cookie =
      post(Kind::kControlSend, peer, controlTag_, bytes.data(), bytes.size(), completion);
  controlSends_.emplace(cookie, std::move(bytes));  // the buffer's heap block does not move
  return cookie;
}

void Transfers::clear() {
  posted_.clear();
  free_.clear();
  for (auto& [cookie, bytes] : controlSends_) retired_.push_back(std::move(bytes));
  controlSends_.clear();
}

void Transfers::endTraffic(bool transportQuiesced) {
  if (transportQuiesced || retired_.empty()) {
    retired_.clear();
    return;
  }
  // Left allocated for the process's life, as the chunk runner's scratch (ScratchPool::abandon):
  // the transport may read them yet.
  (void)new std::vector<std::vector<unsigned char>>(std::move(retired_));
}

void Transfers::throwUnknown(uint64_t cookie) {
  fail(priocclInternalError, "completion with unknown cookie ", cookie);
}

}  // namespace prioccl::detail
