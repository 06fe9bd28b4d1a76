#include "modes/agree.h"

#include <vector>

#include "core/error.h"

namespace prioccl::detail {

void agreeAcrossRanks(const Communicator& comm, const char* what,
                      std::initializer_list<std::pair<const char*, long long>> fields) {
  std::vector<long long> mine;
  for (const auto& f : fields) mine.push_back(f.second);
  // Two blocking all-reduces (min, max): equal on every rank exactly when all ranks agree.
  std::vector<long long> lo(mine.size()), hi(mine.size());
  Communicator c = comm;  // a handle on the same communicator
  c.allReduce(mine.data(), lo.data(), mine.size(), priocclInt64, priocclMin);
  c.allReduce(mine.data(), hi.data(), mine.size(), priocclInt64, priocclMax);
  size_t i = 0;
  for (const auto& f : fields) {
    if (lo[i] != hi[i])
      fail(priocclInvalidUsage, what, ": ranks disagree on ", f.first, " (values from ", lo[i],
           " to ", hi[i], "; this rank has ", mine[i], ")");
    ++i;
  }
}

}  // namespace prioccl::detail
