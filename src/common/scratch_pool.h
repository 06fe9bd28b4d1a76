// Fixed-size scratch blocks recycled between chunks: chunks come and go at a high rate, and
// blocks of a few hundred KiB would otherwise be mapped and unmapped every time.
//
// The pool keeps at most kRetainBytes of free blocks (and at least kMinRetained blocks): a burst
// of live chunks (a 64 MiB reduce posts every chunk's receives at once) may take hundreds of
// blocks, and a pool that kept them all would hold its highest demand for the communicator's
// life, so a long job's memory would only ever grow. Blocks are mapped directly rather than
// malloc'ed, so a block given back beyond the limit returns its memory to the system at once
// instead of staying in the allocator's heap.
//
// When the communicator fails, cancelled receives may still be writing into blocks whose chunks
// are gone (transport.h, cancelAll): the pool then holds every block given back (hold()), and at
// the end either frees them, once the transport has stopped for good, or keeps them mapped for
// the process's life (abandon()) when the transport cannot promise that.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace prioccl {

#if defined(__SANITIZE_ADDRESS__)
#define PRIOCCL_SCRATCH_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PRIOCCL_SCRATCH_HEAP 1
#endif
#endif

class ScratchPool {
#ifdef PRIOCCL_SCRATCH_HEAP
  static constexpr bool kHeapBlocks = true;
#else
  static constexpr bool kHeapBlocks = false;
#endif

 public:
  static constexpr size_t kRetainBytes = 64 << 20, kMinRetained = 8;

  // A mapped block's length; 0: a block from new[] (sanitizer builds, where heap blocks keep
  // AddressSanitizer's redzones around scratch: the fuzzers find overflows through them).
  struct Unmap {
    size_t bytes = 0;
    void operator()(unsigned char* p) const {
      if (bytes)
        munmap(p, bytes);
      else
        delete[] p;
    }
  };
  using Block = std::unique_ptr<unsigned char[], Unmap>;

  explicit ScratchPool(size_t blockBytes)
      : blockBytes_(blockBytes),
        retained_(std::max(kMinRetained, kRetainBytes / std::max<size_t>(blockBytes, 1))) {}
  size_t blockBytes() const {
    return blockBytes_;
  }
  size_t retainedLimit() const {
    return retained_;
  }  // free blocks kept, at most
  size_t freeBlocks() const {
    return free_.size();
  }
  Block take() {
    if (free_.empty()) {
      size_t bytes = std::max<size_t>(blockBytes_, 1);
      if (kHeapBlocks) return Block(new unsigned char[bytes], Unmap{0});
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      return Block(static_cast<unsigned char*>(p), Unmap{bytes});
    }
    Block b = std::move(free_.back());
    free_.pop_back();
    return b;
  }
  void give(Block b) {
    if (b && (held_ || free_.size() < retained_)) free_.push_back(std::move(b));
  }
  bool held() const {
    return held_;
  }
  void hold() {
    held_ = true;
  }
  void abandon() {
    abandoned_ = true;
  }
  ~ScratchPool() {
    if (abandoned_)
      for (Block& b : free_) (void)b.release();
  }
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;
  ScratchPool(ScratchPool&&) = default;
  ScratchPool& operator=(ScratchPool&&) = default;

 private:
  size_t blockBytes_, retained_;
  std::vector<Block> free_;
  bool held_ = false, abandoned_ = false;
};

}  // namespace prioccl
