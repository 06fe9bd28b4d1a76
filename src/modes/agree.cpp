#include "modes/agree.h"

#include <vector>

#include "common/error.h"
#include "common/same_everywhere.h"
#include "device/device_memory.h"

namespace prioccl::detail {
namespace {

// One blocking all-reduce (MAX) of the values and their flips (common/same_everywhere.h).
template <typename T>
void agree(const Communicator& comm, const char* what, priocclDataType_t datatype,
           std::initializer_list<std::pair<const char*, T>> fields) {
  std::vector<T> mine;
  for (const auto& f : fields) mine.push_back(f.second);
  std::vector<T> sent = withFlips(mine), maxima(sent.size());
  Communicator c = comm;  // a handle on the same communicator
  device::DeviceMemory* memory = device::current();
  if (collectivesOnDevice(comm) && memory) {  // the values travel through the current device
    const size_t bytes = sent.size() * sizeof(T);
    device::DeviceBuffer on(*memory, 2 * bytes);
    auto* in = static_cast<unsigned char*>(on.data());
    memory->copy(in, sent.data(), bytes);
    c.allReduce(in, in + bytes, sent.size(), datatype, priocclMax);
    memory->copy(maxima.data(), in + bytes, bytes);
  } else {
    c.allReduce(sent.data(), maxima.data(), sent.size(), datatype, priocclMax);
  }
  T lo{}, hi{};
  long i = firstDisagreement(maxima, mine.size(), &lo, &hi);
  if (i < 0) return;
  fail(priocclInvalidUsage, what, ": ranks disagree on ", (fields.begin() + i)->first,
       " (values from ", lo, " to ", hi, "; this rank has ", mine[static_cast<size_t>(i)], ")");
}

}  // namespace

bool collectivesOnDevice(const Communicator& comm) {
  return comm.config().transport == priocclTransportNccl;
}

void agreeAcrossRanks(const Communicator& comm, const char* what,
                      std::initializer_list<std::pair<const char*, long long>> fields) {
  agree(comm, what, priocclInt64, fields);
}

void agreeOnDoublesAcrossRanks(const Communicator& comm, const char* what,
                               std::initializer_list<std::pair<const char*, double>> fields) {
  agree(comm, what, priocclFloat64, fields);
}

}  // namespace prioccl::detail
