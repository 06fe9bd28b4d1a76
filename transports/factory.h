// Where bootstraps and transports are built: the one place that knows which exist in this build,
// so that the layers above name them by value (priocclTransport_t) and include no transport
// header.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "coll_backend.h"
#include "prioccl/prioccl.h"
#include "transport.h"

namespace prioccl {

// The bootstrap of a communicator created from an MPI communicator (`mpiComm` points to an
// MPI_Comm; null: MPI_COMM_WORLD). Initialises MPI when nobody has.
std::unique_ptr<Bootstrap> makeMpiBootstrap(const void* mpiComm, bool requireThreadMultiple);

// The bootstrap of a job launched without MPI (tcp/tcp_bootstrap.h) from a unique id's
// PRIOCCL_UNIQUE_ID_BYTES bytes; every step waits at most `timeoutSeconds` (0: a day).
std::unique_ptr<Bootstrap> makeTcpBootstrap(const unsigned char* id, int nranks, int rank,
                                            double timeoutSeconds);
// A new unique id into `out` (PRIOCCL_UNIQUE_ID_BYTES bytes): PRIOCCL_COMM_ID's address when
// `commId` is set, else a listener on this host's first address that `ifname` lets through.
void makeUniqueId(unsigned char* out, const std::string& commId, const std::string& ifname);
// Whether the processes were bootstrapped by MPI (the MPI transports need it).
bool launchedByMpi(const Bootstrap& bootstrap);

struct TransportOptions {
  bool ucxWakeup = false;     // Config::ucxWakeup
  std::string ucxNetDevices;  // UCX's NET_DEVICES for this rank; "": UCX's own choice
  std::string socketIfname;   // Config::socketIfname (tcp)
  size_t socketSndbuf = 0;    // Config::socketSndbuf (tcp); 0: sends wait for acknowledgements
  // Per rank, 1 when it shares this rank's host as the communicator groups hosts (hostname and
  // shared memory, or PRIOCCL_HOST_ID: topology/host_groups.h). Empty: the bootstrap's answer,
  // which under MPI calls network namespaces of one machine one host. (tcp: loopback first.)
  std::vector<char> sameHost;
};

// Collective over `bootstrap`: every rank must ask for the same kind. Throws
// priocclInvalidUsage for a kind this build or this bootstrap cannot provide.
std::unique_ptr<Transport> makeTransport(priocclTransport_t kind, Bootstrap& bootstrap,
                                         const TransportOptions& options);

// The collective backend a transport kind brings (mpi-coll: MPI's non-blocking collectives on a
// private communicator), or null for the point-to-point kinds. Collective over `bootstrap`.
std::unique_ptr<CollBackend> makeCollBackend(priocclTransport_t kind, Bootstrap& bootstrap);

// PRIOCCL_FEATURE_* bits (prioccl.h) of what this build has.
int buildFeatures();
// NCCL_VERSION_CODE of the nccl.h this build compiled against; 0 without NCCL.
int ncclHeaderVersion();

}  // namespace prioccl
