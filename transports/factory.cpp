#include "factory.h"

#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "common/log.h"
#include "mpi/mpi_bootstrap.h"
#include "mpi/mpi_coll_backend.h"
#ifdef PRIOCCL_HAVE_NCCL
#include "nccl/nccl_coll_backend.h"
#endif
#include "mpi/mpi_transport.h"
#include "tcp/tcp_bootstrap.h"
#include "tcp/tcp_transport.h"
#ifdef PRIOCCL_HAVE_UCX
#include "ucx/ucx_transport.h"
#endif

namespace prioccl {

using detail::fail;

std::unique_ptr<Bootstrap> makeMpiBootstrap(const void* mpiComm, bool requireThreadMultiple) {
  return std::make_unique<MpiBootstrap>(static_cast<const MPI_Comm*>(mpiComm),
                                        requireThreadMultiple);
}

std::unique_ptr<Bootstrap> makeTcpBootstrap(const unsigned char* id, int nranks, int rank,
                                            double timeoutSeconds) {
  UniqueIdFields fields;
  std::string error;
  if (!decodeUniqueId(id, &fields, &error)) fail(priocclInvalidArgument, "commId: ", error);
  const double seconds = timeoutSeconds > 0 ? std::min(timeoutSeconds, 86400.0) : 86400.0;
  return std::make_unique<TcpBootstrap>(
      fields, rank, nranks, std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
}

void makeUniqueId(unsigned char* out, const std::string& commId, const std::string& ifname) {
  encodeUniqueId(newUniqueId(commId, ifname), out);
}

bool launchedByMpi(const Bootstrap& bootstrap) {
  return dynamic_cast<const MpiBootstrap*>(&bootstrap) != nullptr;
}

namespace {

std::unique_ptr<Transport> makeMpi(Bootstrap& bootstrap) {
  auto* mpi = dynamic_cast<MpiBootstrap*>(&bootstrap);
  if (!mpi)
    fail(priocclInvalidUsage,
         "PRIOCCL_TRANSPORT=mpi needs a communicator created from MPI (priocclCommInitWorld/MPI or "
         "Communicator::fromMpi); use PRIOCCL_TRANSPORT=ucx");
  return std::make_unique<MpiTransport>(mpi->duplicate());
}

std::unique_ptr<Transport> makeUcx(Bootstrap& bootstrap, const TransportOptions& options) {
#ifdef PRIOCCL_HAVE_UCX
  auto ucx = std::make_unique<UcxTransport>(bootstrap, options.ucxWakeup, options.ucxNetDevices);
  if (ucx->rank() == 0 && detail::logLevel() >= detail::LogLevel::kInfo)
    detail::log(detail::LogLevel::kInfo, "UCX ", ucx->describeLanes());
  return ucx;
#else
  (void)bootstrap;
  (void)options;
  fail(priocclInvalidUsage,
       "PRIOCCL_TRANSPORT=ucx, but this prioccl was built without UCX (install UCX's "
       "development files, e.g. Debian's libucx-dev, and rebuild)");
#endif
}

}  // namespace

std::unique_ptr<Transport> makeTransport(priocclTransport_t kind, Bootstrap& bootstrap,
                                         const TransportOptions& options) {
  switch (kind) {
    case priocclTransportMpi:
    case priocclTransportAuto:     // settled by the communicator before this; MPI if not
    case priocclTransportMpiColl:  // control messages and point-to-point ops
      return makeMpi(bootstrap);
    case priocclTransportNccl:  // the same, over UCX or tcp where MPI did not launch the job
      if (launchedByMpi(bootstrap)) return makeMpi(bootstrap);
      if (buildFeatures() & PRIOCCL_FEATURE_UCX) return makeUcx(bootstrap, options);
      return makeTransport(priocclTransportTcp, bootstrap, options);
    case priocclTransportUcx:
      return makeUcx(bootstrap, options);
    case priocclTransportTcp: {
      auto tcp = std::make_unique<TcpTransport>(bootstrap, options.socketIfname, options.sameHost,
                                                options.socketSndbuf);
      if (tcp->rank() == 0 && detail::logLevel() >= detail::LogLevel::kInfo)
        detail::log(detail::LogLevel::kInfo, "tcp transport: ", tcp->describePeers());
      return tcp;
    }
    case priocclNumTransports:
      break;
  }
  fail(priocclInvalidArgument, "transport value ", static_cast<int>(kind), " is not one of ",
       static_cast<int>(priocclTransportMpi), " (mpi) to ", static_cast<int>(priocclTransportAuto),
       " (auto)");
}

int buildFeatures() {
  int features = 0;
#ifdef PRIOCCL_HAVE_UCX
  features |= PRIOCCL_FEATURE_UCX;
#endif
#ifdef PRIOCCL_HAVE_CUDA
  features |= PRIOCCL_FEATURE_CUDA;
#endif
#ifdef PRIOCCL_HAVE_NCCL
  features |= PRIOCCL_FEATURE_NCCL;
#endif
  return features;
}

int ncclHeaderVersion() {
#ifdef PRIOCCL_HAVE_NCCL
  return NcclCollBackend::headerVersion();
#else
  return 0;
#endif
}

std::unique_ptr<CollBackend> makeCollBackend(priocclTransport_t kind, Bootstrap& bootstrap) {
  if (kind == priocclTransportNccl) {
#ifdef PRIOCCL_HAVE_NCCL
    return std::make_unique<NcclCollBackend>(bootstrap);
#else
    fail(priocclInvalidUsage,
         "PRIOCCL_TRANSPORT=nccl, but this prioccl was built without the CUDA toolkit's headers "
         "and nccl.h (install them and rebuild; the libraries themselves are loaded at run time)");
#endif
  }
  if (kind != priocclTransportMpiColl) return nullptr;
  auto* mpi = dynamic_cast<MpiBootstrap*>(&bootstrap);
  if (!mpi)
    fail(priocclInvalidUsage,
         "PRIOCCL_TRANSPORT=mpi-coll needs a communicator created from MPI (priocclCommInitWorld/"
         "MPI or Communicator::fromMpi)");
  return std::make_unique<MpiCollBackend>(mpi->duplicate());
}

}  // namespace prioccl
