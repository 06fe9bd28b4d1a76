// The agreement header and its merge; see agreement.h.
#include "algo/agreement.h"

#include <cstring>

#include "reduce/reduce.h"

namespace prioccl::detail {
namespace {

constexpr uint32_t kAgreementMagic = 0x50434341;  // "PCCA"

// A header of this library and version (its payload may still be of the wrong length).
bool sound(const AgreementHeader& h) {
  return h.magic == kAgreementMagic && h.version == kControlVersion;
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
  bool valid = sound(lower) && sound(upper) && lower.payloadBytes == lowerPayload &&
               upper.payloadBytes == upperPayload;
  bool agree = false;
  if (sound(lower) && lower.mismatch) {  // a disagreement found earlier is kept
    out = lower;
  } else if (sound(upper) && upper.mismatch) {
    out = upper;
  } else if (!valid) {
    out.mismatch = 1;  // a foreign or corrupt message: report it as a disagreement
    out.rankB = sound(upper) ? upper.rankA : -1;
    // A sound header on a message of unexpected length comes from a peer that moves another
    // amount of data in another pattern, i.e. has other arguments: they are worth naming.
    if (sound(upper)) out.b = upper.a;
  } else if (lower.payloadBytes == upper.payloadBytes && combineArguments(&out.a, upper.a)) {
    agree = true;  // out.a: the two groups' arguments combined (an all-to-all-v's sums)
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
                               bool carryData, size_t maxPayload, bool halving)
    : carryData_(carryData),
      envelope_(own, spec.rank, carryData ? spec.count * reduce::dtypeSize(spec.dtype) : 0,
                maxPayload) {
  if (carryData && halving)
    hd_.emplace(spec, pool, &envelope_);
  else
    rd_.emplace(spec, pool, &envelope_);
}

AgreementChunk::~AgreementChunk() = default;

AgreementHeader AgreementChunk::verdict() const {
  return load(hd_ ? hd_->header() : rd_->header());
}

bool AgreementChunk::dataDone() const {
  return agreed() && carryData_ && (hd_ ? hd_->payloadValid() : rd_->payloadValid());
}

bool AgreementChunk::agreed() const {
  AgreementHeader h = verdict();
  return h.magic == kAgreementMagic && !h.mismatch;
}

}  // namespace prioccl::detail
