// Cost model and choice; see select.h.
#include "algo/select.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>

#include "algo/registry.h"
#include "prioccl/prioccl.hpp"

namespace prioccl {

// Points close enough for straight lines between them to find the crossovers: recursive
// doubling against halving-doubling lies between 8 and 128 KiB, and both carry their data in the
// agreement up to 64 KiB (ChunkRunner::kCarryMaxBytes), which halves their latency there.
std::vector<size_t> AlgoSelector::calibrationSizes(int) {
  return {8, 1 << 10, 8 << 10, 32 << 10, 64 << 10, 128 << 10, 512 << 10};
}

void AlgoSelector::calibrate(const std::vector<size_t>& sizes,
                             const std::vector<std::vector<double>>& times) {
  sizes_ = sizes;
  times_ = times;
}

// Halving-doubling's 2 log2(p) rounds beat the ring's 2 (p - 1) steps until a ring step
// (bytes / p) is about 64 KiB. Measured 2026-12-01 (docs/scaling.md, "Halving-doubling against
// the ring"), ring / hd time: 8 ranks on the 1 Gbit/s testbed 2.12 at 128 KiB, 1.70 at 256 KiB,
// 1.08 at 512 KiB, 0.94 at 1 MiB; 4 ranks on shared memory 1.53 at 128 KiB, 1.61 at 256 KiB;
// 4 ranks on the testbed level (within 2%); the simulator at 16-256 ranks and 10-100 Gbit/s up to
// 7.4 at 1 MiB. Not where halving-doubling sends more than the ring (ranks not a power of two: it
// first folds the extra ranks' whole buffers into partners), where it lost to the ring by
// 1.6-2.0x at 256 KiB-1 MiB on 6 testbed hosts.
void AlgoSelector::setLink(double bytesPerSecond, int nranks) {
  linkBytesPerSecond_ = bytesPerSecond;
  wireSecondsPerByte_.clear();
  for (const AlgoEntry& e : algoRegistry())
    wireSecondsPerByte_.push_back(bytesPerSecond > 0 ? e.sendFactor(nranks) / bytesPerSecond : 0);
  const bool hdSendsAsLittle = algoEntry(priocclAlgoHalvingDoubling).sendFactor(nranks) <=
                               algoEntry(priocclAlgoRing).sendFactor(nranks);
  fixedHdToBytes_ =
      nranks > 0 && hdSendsAsLittle
          ? std::max(kFixedHdToBytes, kFixedHdBytesPerRank * static_cast<size_t>(nranks))
          : kFixedHdToBytes;
  setLevels(levels_);
}

// Per byte of op: inside a host each of the first S ranks sends 2(S-1)/S of it (its ring), and
// an extra rank's whole contribution goes to its partner and back (counted on the partner's
// side: 2 per extra it serves); across hosts each of them sends 2(n-1)/n of its 1/S shard, at
// its share of the host's link. The phases of different chunks overlap, so the slower level
// bounds the op.
void AlgoSelector::setLevels(const HostLevels& levels) {
  levels_ = levels;
  const std::vector<AlgoEntry>& algos = algoRegistry();
  for (size_t k = 0; k < algos.size() && k < wireSecondsPerByte_.size(); ++k) {
    if (algos[k].id != priocclAlgoHierarchical || levels.hosts <= 1) continue;
    const double S = levels.shards, n = levels.hosts;
    const double extrasPerPartner = std::ceil((levels.most - S) / S);
    double intra = 2 * (S - 1) / S + 2 * extrasPerPartner, across = 2 * (n - 1) / n / S;
    double t = 0;
    if (levels.intraBytesPerSecond > 0) t = std::max(t, intra / levels.intraBytesPerSecond);
    if (levels.interBytesPerSecond > 0) t = std::max(t, across / levels.interBytesPerSecond);
    wireSecondsPerByte_[k] = t;
  }
}

double AlgoSelector::modelSeconds(priocclAlgorithm_t a, size_t bytes) const {
  if (sizes_.empty()) return -1;
  const std::vector<AlgoEntry>& algos = algoRegistry();
  size_t k = 0;
  while (k < algos.size() && algos[k].id != a) ++k;
  if (k == algos.size() || k >= times_.size() || times_[k].size() != sizes_.size()) return -1;
  if (a == priocclAlgoHierarchical && levels_.hosts <= 1) return -1;  // one level: the ring
  const std::vector<double>& t = times_[k];
  double n = static_cast<double>(bytes);
  double wire = k < wireSecondsPerByte_.size() ? wireSecondsPerByte_[k] * n : 0;
  if (n <= static_cast<double>(sizes_.front())) return std::max(t.front(), wire);
  size_t i = 1;
  while (i + 1 < sizes_.size() && n > static_cast<double>(sizes_[i])) ++i;
  // alpha + beta * n through the interval's two measured points (extended past the last one).
  double x0 = static_cast<double>(sizes_[i - 1]), x1 = static_cast<double>(sizes_[i]);
  double beta = std::max(0.0, (t[i] - t[i - 1]) / (x1 - x0));
  double alpha = t[i - 1] - beta * x0;
  return std::max(alpha + beta * n, wire);
}

bool AlgoSelector::usesModel() const {
  if (rules_.empty()) return forced_ == priocclAlgoAuto;
  for (const AlgoRule& r : rules_)
    if (r.algo == priocclAlgoAuto) return true;
  return false;
}

priocclAlgorithm_t AlgoSelector::choose(size_t bytes) const {
  for (const AlgoRule& r : rules_) {
    if (bytes >= r.below) continue;
    if (r.algo != priocclAlgoAuto) return r.algo;
    break;
  }
  if (!rules_.empty() || forced_ == priocclAlgoAuto) return modelChoice(bytes);
  return forced_;
}

// Without calibration (the default: a timed choice flips between algorithms near a crossover from
// run to run, and with it the order of every sum): a fixed rule at the calibrated model's
// crossovers on the 1 Gbit/s testbed (rd below 32 KiB, hd from 32 KiB; at 32 KiB hd took
// 417-433 us and rd 552 us, 2026-11-28) and shared memory (rd fastest up to 32 KiB). Two levels
// of links is a fact of the layout, not a timing, so the hierarchical all-reduce is chosen there
// too, from 256 KiB (the calibrated crossover was 32-256 KiB on 2 hosts x 2-4 ranks).
priocclAlgorithm_t AlgoSelector::modelChoice(size_t bytes) const {
  if (sizes_.empty()) {
    if (levels_.hosts > 1 && bytes >= kFixedHierBytes) return priocclAlgoHierarchical;
    if (bytes < kFixedHdFromBytes) return priocclAlgoRecursiveDoubling;
    return bytes <= fixedHdToBytes_ ? priocclAlgoHalvingDoubling : priocclAlgoRing;
  }
  priocclAlgorithm_t best = priocclAlgoRing;
  double bestT = modelSeconds(best, bytes);
  for (const AlgoEntry& e : algoRegistry()) {
    double t = modelSeconds(e.id, bytes);
    if (t >= 0 && (bestT < 0 || t < bestT)) {  // unmeasured algorithms (t < 0) are never chosen
      best = e.id;
      bestT = t;
    }
  }
  return best;
}

std::string AlgoSelector::describe() const {
  std::ostringstream out;
  if (!rules_.empty()) {
    out << "size rules:";
    for (const AlgoRule& r : rules_) {
      out << " " << algorithmName(r.algo);
      if (r.below != SIZE_MAX) out << "<" << r.below << "B";
    }
    if (!usesModel()) return out.str();
    out << "; ";
  } else if (forced_ != priocclAlgoAuto) {
    out << "algorithm forced: " << algorithmName(forced_);
    return out.str();
  }
  if (sizes_.empty()) {
    out << "uncalibrated: rd below 32 KiB, hd up to " << (fixedHdToBytes_ >> 10) << " KiB";
    if (fixedHdToBytes_ > kFixedHdToBytes)
      out << " (" << (kFixedHdBytesPerRank >> 10) << " KiB x "
          << fixedHdToBytes_ / kFixedHdBytesPerRank << " ranks)";
    out << ", ring above" << (levels_.hosts > 1 ? " (hier from 256 KiB: two levels)" : "");
    return out.str();
  }
  if (linkBytesPerSecond_ > 0)
    out << "sustained link " << std::lround(linkBytesPerSecond_ / 1e6) << " MB/s (a floor); ";
  if (levels_.hosts > 1)
    out << levels_.hosts << " hosts, links inside "
        << std::lround(levels_.intraBytesPerSecond / 1e6) << " MB/s "
        << std::lround(levels_.intraLatencySeconds * 1e7) / 10.0 << " us, across "
        << std::lround(levels_.interBytesPerSecond / 1e6) << " MB/s "
        << std::lround(levels_.interLatencySeconds * 1e7) / 10.0 << " us per rank; ";
  out << "measured us at";
  for (size_t s : sizes_) out << " " << s << "B";
  for (size_t k = 0; k < times_.size() && k < algoRegistry().size(); ++k) {
    if (times_[k].empty()) continue;  // not measured (hier with one level)
    out << "; " << algoRegistry()[k].name << ":";
    for (double t : times_[k]) out << " " << std::lround(t * 1e7) / 10.0;
  }
  out << "; choice by size:";
  priocclAlgorithm_t last = priocclNumAlgos;
  for (size_t b = 8; b <= (size_t{1} << 30); b *= 2) {
    priocclAlgorithm_t a = choose(b);
    if (a != last) out << " " << b << "B+=" << algorithmName(a);
    last = a;
  }
  return out.str();
}

}  // namespace prioccl
