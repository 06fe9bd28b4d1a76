#include "api/calibration.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "algo/registry.h"

namespace prioccl::detail::calibration {
namespace {

std::mutex g_modelsMutex;
std::map<std::vector<int>, AlgoSelector> g_models;

}  // namespace

void measure(AlgoSelector& selector, int nranks, bool twoLevel, const RunAllReduce& runAllReduce) {
  // Small ops are cheap to repeat, and their algorithms' times lie close together (recursive
  // doubling and halving-doubling within 10-20 % up to 64 KiB): more samples for them.
  auto repsFor = [](size_t bytes) { return bytes <= (64 << 10) ? 9 : 5; };
  std::vector<size_t> sizes = AlgoSelector::calibrationSizes(nranks);
  const std::vector<AlgoEntry>& algos = algoRegistry();
  const size_t nAlgos = algos.size();
  std::vector<float> in(sizes.back() / sizeof(float), 1.0f), out(in.size());
  auto run = [&](size_t bytes, priocclAlgorithm_t a) {
    return runAllReduce(in.data(), out.data(), std::max<size_t>(1, bytes / sizeof(float)),
                        priocclFloat32, priocclSum, a);
  };
  // With one level the hierarchical all-reduce is the ring: not worth its time here.
  auto measured = [&](size_t k) { return algos[k].id != priocclAlgoHierarchical || twoLevel; };
  for (size_t k = 0; k < nAlgos; ++k)
    if (measured(k)) run(sizes.back(), algos[k].id);  // warm-up
  std::vector<double> table(nAlgos * sizes.size()), worst(table.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<std::vector<double>> samples(nAlgos);
    const int reps = repsFor(sizes[i]);
    for (int rep = 0; rep < reps; ++rep)  // interleaved, so drifting noise hits all alike
      for (size_t k = 0; k < nAlgos; ++k)
        if (measured(k)) samples[k].push_back(run(sizes[i], algos[k].id));
    for (size_t k = 0; k < nAlgos; ++k) {
      if (!measured(k)) continue;
      std::nth_element(samples[k].begin(), samples[k].begin() + reps / 2, samples[k].end());
      table[k * sizes.size() + i] = samples[k][reps / 2];
    }
  }
  runAllReduce(table.data(), worst.data(), table.size(), priocclFloat64, priocclMax,
               priocclAlgoRecursiveDoubling);
  std::vector<std::vector<double>> times(nAlgos);
  for (size_t k = 0; k < nAlgos; ++k)
    if (measured(k))
      times[k].assign(worst.begin() + k * sizes.size(), worst.begin() + (k + 1) * sizes.size());
  selector.calibrate(sizes, times);
}

const AlgoSelector* known(const std::vector<int>& key) {
  std::lock_guard<std::mutex> lock(g_modelsMutex);
  auto it = g_models.find(key);
  return it == g_models.end() ? nullptr : &it->second;
}

void remember(const std::vector<int>& key, const AlgoSelector& selector) {
  std::lock_guard<std::mutex> lock(g_modelsMutex);
  g_models[key] = selector;
}

}  // namespace prioccl::detail::calibration
