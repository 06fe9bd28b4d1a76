// Agreement on an unnamed op without a coordinator. Unnamed ops match by submission order, so
// every rank already knows which op is which; what is left to check is that all ranks passed the
// same collective, root, count, datatype and reduction op. That check rides in a small header on a
// recursive doubling exchange, and a small op's data rides along in the same messages: agreement
// and reduction finish together in ceil(log2 p) rounds, with no round trip through rank 0. A small
// op whose algorithm is halving-doubling carries its data on that algorithm's scattering rounds
// instead, which pair the ranks exactly as recursive doubling does (halving_doubling.h).
//
// Every rank ends with the same merged header: "all agree" or the first disagreement found (two
// ranks and their arguments), so a mismatched op fails on every rank with the same message, its
// data is not reduced, and no rank waits for messages that never come.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "algo/halving_doubling.h"
#include "algo/recursive_doubling.h"
#include "common/wire.h"

namespace prioccl::detail {

struct AgreementHeader {
  uint32_t magic = 0;
  uint16_t version = 0;
  uint16_t mismatch = 0;  // 0: every rank of the group had `a`; 1: rankA had a, rankB had b
  int32_t rankA = -1, rankB = -1;
  uint64_t payloadBytes = 0;  // data carried after the header (the same for the whole group)
  Announce a{}, b{};
};
static_assert(sizeof(AgreementHeader) == 168, "wire layout");

class AgreementChunk final : public ChunkAlgo {
 public:
  // `own`: this rank's arguments (occurrence = the op's unnamed sequence number). `carryData`:
  // the op is small enough to be reduced by the exchange itself; `halving`: by halving-doubling
  // rather than recursive doubling. `maxPayload` is the same on every rank (blocks of `pool` hold
  // sizeof(AgreementHeader) + maxPayload).
  AgreementChunk(const ChunkSpec& spec, ScratchPool& pool, const Announce& own, bool carryData,
                 size_t maxPayload, bool halving = false);
  ~AgreementChunk() override;

  static size_t scratchBytes(size_t maxPayload) { return sizeof(AgreementHeader) + maxPayload; }

  bool sendReady() const override { return exchange().sendReady(); }
  Transfer takeSend() override { return exchange().takeSend(); }
  bool recvReady() const override { return exchange().recvReady(); }
  Transfer takeRecv() override { return exchange().takeRecv(); }
  void sendDone(int step) override { exchange().sendDone(step); }
  void recvDone(int step) override { exchange().recvDone(step); }
  void recvLength(int step, size_t bytes) override { exchange().recvLength(step, bytes); }
  bool finished() const override { return exchange().finished(); }

  // Once finished: whether every rank agreed; if so, whether the data is already reduced (into
  // spec.recv); if not, the disagreement for the error message.
  bool agreed() const;
  bool dataDone() const;
  AgreementHeader verdict() const;

 private:
  // The header's part in the exchange: written, merged and checked (agreement.cpp).
  class Envelope final : public prioccl::Envelope {
   public:
    Envelope(const Announce& own, int rank, size_t payload, size_t maxPayload)
        : own_(own), rank_(rank), payload_(payload), maxPayload_(maxPayload) {}
    size_t headerBytes() const override { return sizeof(AgreementHeader); }
    size_t maxPayloadBytes() const override { return maxPayload_; }
    size_t ownPayloadBytes() const override { return payload_; }
    void writeOwn(void* header) const override;
    bool merge(void* dst, const void* lowerBytes, size_t lowerPayload, const void* upperBytes,
               size_t upperPayload) override;
    bool accepts(const void* header) const override;

   private:
    Announce own_;
    int rank_;
    size_t payload_, maxPayload_;
  };
  ChunkAlgo& exchange() { return hd_ ? static_cast<ChunkAlgo&>(*hd_) : *rd_; }
  const ChunkAlgo& exchange() const { return hd_ ? static_cast<const ChunkAlgo&>(*hd_) : *rd_; }

  // Members, not separate allocations: every unnamed op makes one of these (issue 19).
  bool carryData_;
  Envelope envelope_;
  // Exactly one of them, after envelope_, which it points to.
  std::optional<RecursiveDoublingChunk> rd_;
  std::optional<HalvingDoublingChunk> hd_;
};

}  // namespace prioccl::detail
