#include "mpi/mpi_bootstrap.h"

#include <climits>
#include <mutex>

#include "common/error.h"

namespace prioccl {

using detail::concat;
using detail::fail;

std::string mpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return concat("MPI error ", code);
  return std::string(text, static_cast<size_t>(len));
}

namespace {

// MPI is initialised at most once per process; if prioccl did it, the last bootstrap destroyed
// finalises it.
std::mutex g_mpiMutex;
int g_live = 0;
bool g_initialisedByUs = false;

const char* threadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    default:
      return "MPI_THREAD_MULTIPLE";
  }
}

// For each rank of `comm`, its rank in `other` (-1 where it is not in `other`).
std::vector<int> ranksIn(MPI_Comm comm, MPI_Comm other) {
  MPI_Group group, otherGroup;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(other, &otherGroup);
  int n = 0;
  MPI_Group_size(group, &n);
  std::vector<int> mine(static_cast<size_t>(n)), theirs(mine.size());
  for (int i = 0; i < n; ++i) mine[i] = i;
  MPI_Group_translate_ranks(group, n, mine.data(), otherGroup, theirs.data());
  for (int& r : theirs)
    if (r == MPI_UNDEFINED) r = -1;
  MPI_Group_free(&group);
  MPI_Group_free(&otherGroup);
  return theirs;
}

// Initialises MPI if needed and checks its thread level; returns whether this call initialised
// it. On failure MPI is left as found.
bool openMpi(bool requireThreadMultiple) {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (finalised) fail(priocclInvalidUsage, "MPI has already been finalised");
  int provided = MPI_THREAD_SINGLE;
  bool ours = false;
  if (!initialised) {
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) fail(priocclSystemError, "MPI_Init_thread failed: ", mpiErrorString(rc));
    ours = true;
  } else {
    MPI_Query_thread(&provided);
  }
  // Our progress thread calls MPI while the application's threads may call it too.
  if (provided < MPI_THREAD_SERIALIZED ||
      (provided < MPI_THREAD_MULTIPLE && (requireThreadMultiple || ours))) {
    std::string msg = concat(
        "MPI provides ", threadLevelName(provided),
        ", but prioccl's progress thread calls MPI concurrently with the application and needs "
        "MPI_THREAD_MULTIPLE: initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
    if (provided == MPI_THREAD_SERIALIZED)
      msg +=
          ", or set PRIOCCL_MPI_THREAD_CHECK=0 if the application makes no MPI call while "
          "prioccl ops are in flight";
    if (ours) MPI_Finalize();
    fail(priocclInvalidUsage, msg);
  }
  return ours;
}

int checkedCount(size_t bytes, const char* call) {
  if (bytes > INT_MAX) fail(priocclInternalError, "bootstrap ", call, " of ", bytes, " bytes");
  return static_cast<int>(bytes);
}

}  // namespace

MpiBootstrap::MpiBootstrap(const MPI_Comm* userComm, bool requireThreadMultiple)
    : requireThreadMultiple_(requireThreadMultiple) {
  std::lock_guard<std::mutex> lock(g_mpiMutex);
  bool ours = openMpi(requireThreadMultiple);
  auto giveUp = [ours] {
    if (ours) MPI_Finalize();
  };
  MPI_Comm base = userComm ? *userComm : MPI_COMM_WORLD;
  // MPI_Comm_dup(MPI_COMM_NULL) goes to MPI's default handler, which aborts the job.
  if (base == MPI_COMM_NULL) {
    giveUp();
    fail(priocclInvalidArgument, "mpiComm points to MPI_COMM_NULL, not a communicator");
  }
  int rc = MPI_Comm_dup(base, &comm_);
  if (rc != MPI_SUCCESS) {
    giveUp();
    fail(priocclInvalidArgument,
         "MPI_Comm_dup of the given communicator failed: ", mpiErrorString(rc));
  }
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);  // duplicates inherit it
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  worldRanks_ = ranksIn(comm_, MPI_COMM_WORLD);
  g_initialisedByUs = g_initialisedByUs || ours;
  ++g_live;
}

MpiBootstrap::~MpiBootstrap() {
  std::lock_guard<std::mutex> lock(g_mpiMutex);
  // After MPI_Finalize (the application's) nothing may be freed; the handle goes with MPI.
  if (usable()) MPI_Comm_free(&comm_);
  if (--g_live == 0 && g_initialisedByUs) {
    if (usable()) MPI_Finalize();
    g_initialisedByUs = false;
  }
}

bool MpiBootstrap::concurrentCallsAllowed() const {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level >= MPI_THREAD_MULTIPLE;
}

bool MpiBootstrap::usable() const {
  int finalised = 0;
  MPI_Finalized(&finalised);
  return !finalised;
}

void MpiBootstrap::check(int rc, const char* call) const {
  if (rc != MPI_SUCCESS)
    fail(priocclSystemError, "bootstrap ", call, " on rank ", rank_, " of ", size_,
         " failed: ", mpiErrorString(rc));
}

std::vector<std::vector<char>> MpiBootstrap::allGather(const void* data, size_t bytes) {
  int mine = checkedCount(bytes, "MPI_Allgather");
  std::vector<int> lengths(static_cast<size_t>(size_)), offsets(lengths.size());
  check(MPI_Allgather(&mine, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_), "MPI_Allgather");
  size_t total = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    offsets[i] = checkedCount(total, "MPI_Allgatherv");
    total += static_cast<size_t>(lengths[i]);
  }
  checkedCount(total, "MPI_Allgatherv");
  std::vector<char> all(total);
  check(MPI_Allgatherv(data, mine, MPI_BYTE, all.data(), lengths.data(), offsets.data(), MPI_BYTE,
                       comm_),
        "MPI_Allgatherv");
  std::vector<std::vector<char>> out(lengths.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i].assign(all.begin() + offsets[i], all.begin() + offsets[i] + lengths[i]);
  return out;
}

void MpiBootstrap::allReduceMax(std::vector<double>& values) {
  std::vector<double> in = values;
  check(MPI_Allreduce(in.data(), values.data(), checkedCount(values.size(), "MPI_Allreduce"),
                      MPI_DOUBLE, MPI_MAX, comm_),
        "MPI_Allreduce");
}

void MpiBootstrap::barrier() {
  check(MPI_Barrier(comm_), "MPI_Barrier");
}

std::vector<char> MpiBootstrap::sameHost() {
  std::vector<char> local(static_cast<size_t>(size_), 0);
  MPI_Comm host = MPI_COMM_NULL;
  check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host),
        "MPI_Comm_split_type");
  for (int r : ranksIn(host, comm_))
    if (r >= 0) local[r] = 1;
  MPI_Comm_free(&host);
  return local;
}

// One tag for every blocking exchange: they never overlap (each is collective or a strict
// request-reply), and the transports work on communicators of their own.
constexpr int kBootstrapTag = 1;

void MpiBootstrap::send(int peer, const void* data, size_t bytes) {
  check(MPI_Send(data, checkedCount(bytes, "MPI_Send"), MPI_BYTE, peer, kBootstrapTag, comm_),
        "MPI_Send");
}

void MpiBootstrap::recv(int peer, void* data, size_t bytes) {
  check(MPI_Recv(data, checkedCount(bytes, "MPI_Recv"), MPI_BYTE, peer, kBootstrapTag, comm_,
                 MPI_STATUS_IGNORE),
        "MPI_Recv");
}

void MpiBootstrap::sendRecv(int to, const void* out, int from, void* in, size_t bytes) {
  int n = checkedCount(bytes, "MPI_Sendrecv");
  check(MPI_Sendrecv(out, n, MPI_BYTE, to, kBootstrapTag, in, n, MPI_BYTE, from, kBootstrapTag,
                     comm_, MPI_STATUS_IGNORE),
        "MPI_Sendrecv");
}

MPI_Comm MpiBootstrap::duplicate() {
  MPI_Comm dup = MPI_COMM_NULL;
  check(MPI_Comm_dup(comm_, &dup), "MPI_Comm_dup");
  return dup;
}

std::unique_ptr<Bootstrap> MpiBootstrap::split(int color, int key) {
  MPI_Comm part = MPI_COMM_NULL;
  check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &part), "MPI_Comm_split");
  if (part == MPI_COMM_NULL) return nullptr;
  std::unique_ptr<Bootstrap> out;
  try {
    out = std::make_unique<MpiBootstrap>(&part, requireThreadMultiple_);  // keeps a duplicate
  } catch (...) {
    MPI_Comm_free(&part);
    throw;
  }
  MPI_Comm_free(&part);
  return out;
}

}  // namespace prioccl
