// An in-memory fabric for tests that run several ranks in one process (test_scheduler: engines
// on threads; test_chunk_runner: chunk runners stepped by hand). It moves messages only when the
// test calls deliver(), so the order on each link is known exactly, and records every data
// message delivered.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "transport.h"

namespace prioccl::test {

// The top tag is the engine's control channel (deliver() moves control messages freely).
inline constexpr uint64_t kTagSpace = uint64_t{1} << 31;

// Holds every posted send until deliver() pairs it with its receive (rendezvous semantics: a
// send stays in flight until its receiver has posted the receive).
class Fabric {
 public:
  struct Message {
    int src, dst;
    uint64_t tag;
    const void* buf;
    size_t bytes;
    uint64_t cookie;
  };
  struct Delivered {
    int src;
    uint64_t tag;
  };

  void send(const Message& m) {
    std::lock_guard<std::mutex> lock(mutex_);
    links_[{m.src, m.dst}].push_back(m);
  }
  void recv(int me, int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
      if (it->dst != me || it->src != peer || it->tag != tag) continue;
      complete(*it, {buf, bytes, cookie});
      unexpected_.erase(it);
      return;
    }
    posted_[{me, peer, tag}] = {buf, bytes, cookie};
  }
  void take(int rank, std::vector<Completion>& out) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto [cookie, bytes] : done_[rank]) {
      Completion c;
      c.cookie = cookie;
      c.bytes = bytes;
      out.push_back(c);
    }
    if (!done_[rank].empty()) lastTake_[rank] = pendingAsks_[rank];
    done_[rank].clear();
  }
  // Rank `rank`'s transport was asked how many transfers it has pending (Transport::pending). An
  // engine asks before each poll of its transport and, once it has no op left, after each round
  // (Engine::idle): either way after the round that handled what its previous poll took.
  void askedPending(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++pendingAsks_[rank];
  }
  // How often rank `rank`'s engine has asked (about once per round of its progress loop).
  uint64_t asks(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    return pendingAsks_[rank];
  }
  // Blocks until every engine over this fabric has handled what was delivered to it: it took its
  // completions, and has asked for its pending transfers since, so the round that reacted to them
  // (its new receives and sends) is over. Replaces a sleep "to let the engines react": a loaded
  // machine can deschedule an engine for longer than any sleep. False after `limit`.
  bool settle(std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        bool settled = true;
        for (auto& [rank, done] : done_) {
          auto took = lastTake_.find(rank);
          settled = settled && done.empty() &&
                    (took == lastTake_.end() || pendingAsks_[rank] > took->second);
        }
        if (settled) return true;
      }
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  // Delivers every control message whose receive is posted and, with dataToo, the first data
  // message of each link (data stays in order). A data message whose receive is not posted yet
  // leaves the link as MPI and UCX handle it: it waits at the receiver as unexpected, and the send
  // completes once a receive matches it. Returns how many moved.
  int deliver(bool dataToo) {
    std::lock_guard<std::mutex> lock(mutex_);
    int moved = 0;
    for (auto& entry : links_) {
      std::deque<Message>& queue = entry.second;
      bool dataSeen = false;
      for (auto it = queue.begin(); it != queue.end();) {
        bool control = it->tag == kTagSpace - 1;
        bool eligible = control || (dataToo && !dataSeen);
        dataSeen = dataSeen || !control;
        auto r = posted_.find({it->dst, it->src, it->tag});
        if (!eligible || (control && r == posted_.end())) {
          ++it;
          continue;
        }
        if (r == posted_.end()) {
          unexpected_.push_back(*it);
        } else {
          complete(*it, r->second);
          posted_.erase(r);
        }
        it = queue.erase(it);
        ++moved;
      }
    }
    return moved;
  }
  // Tags of the messages posted on src -> dst and not delivered yet, in order.
  std::vector<uint64_t> queued(int src, int dst) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<uint64_t> tags;
    for (const Message& m : links_[{src, dst}]) tags.push_back(m.tag);
    return tags;
  }
  std::vector<Delivered> log(int dst) {
    std::lock_guard<std::mutex> lock(mutex_);
    return log_[dst];
  }

 private:
  struct Posted {
    void* buf;
    size_t bytes;
    uint64_t cookie;
  };
  // Under mutex_: message `m` lands in receive `r`.
  void complete(const Message& m, const Posted& r) {
    EXPECT_LE(m.bytes, r.bytes);
    std::memcpy(r.buf, m.buf, std::min(m.bytes, r.bytes));
    done_[m.dst].push_back({r.cookie, m.bytes});
    done_[m.src].push_back({m.cookie, 0});
    if (m.tag != kTagSpace - 1) log_[m.dst].push_back({m.src, m.tag});
  }

  std::mutex mutex_;
  std::map<std::pair<int, int>, std::deque<Message>> links_;
  std::vector<Message> unexpected_;  // data that arrived before its receive, in arrival order
  std::map<std::tuple<int, int, uint64_t>, Posted> posted_;
  std::map<int, std::vector<std::pair<uint64_t, size_t>>> done_;  // (cookie, bytes received)
  std::map<int, uint64_t> pendingAsks_;  // Transport::pending calls, by rank
  std::map<int, uint64_t> lastTake_;     // pendingAsks_ when the rank last took completions
  std::map<int, std::vector<Delivered>> log_;
};

class FabricTransport final : public Transport {
 public:
  FabricTransport(Fabric& f, int rank, int size) : fabric_(f), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "fabric"; }
  uint64_t tagSpace() const override { return kTagSpace; }
  void postSend(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t cookie,
                prioccl::SendCompletion) override {
    ++pending_;
    fabric_.send({rank_, peer, tag, buf, bytes, cookie});
  }
  void postRecv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie) override {
    ++pending_;
    fabric_.recv(rank_, peer, tag, buf, bytes, cookie);
  }
  size_t poll(std::vector<Completion>& out) override {
    size_t before = out.size();
    fabric_.take(rank_, out);
    pending_ -= out.size() - before;
    return out.size() - before;
  }
  size_t pending() const override {
    fabric_.askedPending(rank_);
    return pending_;
  }
  void cancelAll() override {}

 private:
  Fabric& fabric_;
  int rank_, size_;
  size_t pending_ = 0;
};

}  // namespace prioccl::test
