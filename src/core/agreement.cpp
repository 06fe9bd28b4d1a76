// The agreement header and its merge; see agreement.h.
#include "core/agreement.h"

#include <cstring>

#include "reduce/reduce.h"

namespace prioccl::detail {
namespace {

constexpr uint32_t kAgreementMagic = 0x50434341;  // "PCCA"

bool sameArgs(const Announce& x, const Announce& y) {
  return x.key == y.key && x.occurrence == y.occurrence && x.count == y.count &&
         x.dtype == y.dtype && x.op == y.op;
}

bool wellFormed(const AgreementHeader& h, size_t payload) {
  return h.magic == kAgreementMagic && h.version == kControlVersion && h.payloadBytes == payload;
}

AgreementHeader load(const void* p) {
  AgreementHeader h;
  std::memcpy(&h, p, sizeof h);
  return h;
}

}  // namespace

void AgreementChunk::Envelope::writeOwn(void* header) const {
  AgreementHeader h;
  h.magic = kAgreementMagic;
  h.version = kControlVersion;
  h.rankA = rank_;
  h.payloadBytes = payload_;
  h.a = own_;
  std::memcpy(header, &h, sizeof h);
}

// A group that agrees is represented by its lowest rank; the first disagreement found is kept.
// Every rank merges the same groups in the same order, so all end with the same header.
bool AgreementChunk::Envelope::merge(void* dst, const void* lowerBytes, size_t lowerPayload,
                                     const void* upperBytes, size_t upperPayload) {
  AgreementHeader lower = load(lowerBytes), upper = load(upperBytes), out = lower;
  bool valid = wellFormed(lower, lowerPayload) && wellFormed(upper, upperPayload);
  bool agree = false;
  if (!valid) {
    out.mismatch = 1;  // a foreign or corrupt message: report it as a disagreement
    out.rankB = upper.magic == kAgreementMagic ? upper.rankA : -1;
  } else if (lower.mismatch) {
    out = lower;
  } else if (upper.mismatch) {
    out = upper;
  } else if (sameArgs(lower.a, upper.a) && lower.payloadBytes == upper.payloadBytes) {
    agree = true;
  } else {
    out.mismatch = 1;
    out.rankB = upper.rankA;
    out.b = upper.a;
  }
  std::memcpy(dst, &out, sizeof out);
  return agree;
}

bool AgreementChunk::Envelope::accepts(const void* header) const {
  AgreementHeader h = load(header);
  return h.magic == kAgreementMagic && h.version == kControlVersion && h.mismatch == 0;
}

AgreementChunk::AgreementChunk(const ChunkSpec& spec, ScratchPool& pool, const Announce& own,
                               bool carryData, size_t maxPayload)
    : carryData_(carryData),
      envelope_(own, spec.rank, carryData ? spec.count * reduce::dtypeSize(spec.dtype) : 0,
                maxPayload),
      rd_(spec, pool, &envelope_) {}

AgreementChunk::~AgreementChunk() = default;

AgreementHeader AgreementChunk::verdict() const {
  return load(rd_.header());
}

bool AgreementChunk::agreed() const {
  AgreementHeader h = verdict();
  return h.magic == kAgreementMagic && !h.mismatch;
}

}  // namespace prioccl::detail
