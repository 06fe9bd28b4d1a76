#include "modes/agree.h"

#include <vector>

#include "common/error.h"

namespace prioccl::detail {
namespace {

template <typename T>
void agree(const Communicator& comm, const char* what, priocclDataType_t datatype,
           std::initializer_list<std::pair<const char*, T>> fields) {
  std::vector<T> mine;
  for (const auto& f : fields) mine.push_back(f.second);
  // Two blocking all-reduces (min, max): equal on every rank exactly when all ranks agree.
  std::vector<T> lo(mine.size()), hi(mine.size());
  Communicator c = comm;  // a handle on the same communicator
  c.allReduce(mine.data(), lo.data(), mine.size(), datatype, priocclMin);
  c.allReduce(mine.data(), hi.data(), mine.size(), datatype, priocclMax);
  size_t i = 0;
  for (const auto& f : fields) {
    if (lo[i] != hi[i])
      fail(priocclInvalidUsage, what, ": ranks disagree on ", f.first, " (values from ", lo[i],
           " to ", hi[i], "; this rank has ", mine[i], ")");
    ++i;
  }
}

}  // namespace

void agreeAcrossRanks(const Communicator& comm, const char* what,
                      std::initializer_list<std::pair<const char*, long long>> fields) {
  agree(comm, what, priocclInt64, fields);
}

void agreeOnDoublesAcrossRanks(const Communicator& comm, const char* what,
                               std::initializer_list<std::pair<const char*, double>> fields) {
  agree(comm, what, priocclFloat64, fields);
}

}  // namespace prioccl::detail
