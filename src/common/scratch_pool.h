// Fixed-size scratch blocks recycled between chunks: chunks come and go at a high rate, and
// blocks of a few hundred KiB would otherwise be mmap'ed and unmapped by malloc every time.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace prioccl {

class ScratchPool {
 public:
  using Block = std::unique_ptr<unsigned char[]>;
  explicit ScratchPool(size_t blockBytes) : blockBytes_(blockBytes) {}
  size_t blockBytes() const { return blockBytes_; }
  Block take() {
    if (free_.empty()) return Block(new unsigned char[blockBytes_ ? blockBytes_ : 1]);
    Block b = std::move(free_.back());
    free_.pop_back();
    return b;
  }
  void give(Block b) {
    if (b) free_.push_back(std::move(b));
  }

 private:
  size_t blockBytes_;
  std::vector<Block> free_;
};

}  // namespace prioccl
