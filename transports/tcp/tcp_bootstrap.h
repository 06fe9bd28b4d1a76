// The bootstrap of a job launched without MPI (priocclGetUniqueId + priocclCommInitRank, NCCL's
// shape). Rank 0 listens at the address the unique id names; every other rank connects to it,
// opening with the id's job token, and rank 0 hands out the table of every rank's address and
// host key. The collectives go through rank 0 (a star: set-up only, a few small messages); the
// point-to-point messages go over direct connections, made when first needed (the lower rank
// dials the higher one's listener).
//
// Whatever else reaches a listener is logged and dropped, never trusted: every connection must
// open with a frame of the right magic, version and token, a rank in range, the job's size, a
// rank not already taken; a frame that stops halfway is dropped at its own deadline. A rank that
// never arrives fails every rank that did, at the deadline, naming it.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "tcp/bootstrap_wire.h"
#include "tcp/socket_util.h"

namespace prioccl {

// A new id. With `commId` (PRIOCCL_COMM_ID: host:port, [v6]:port) its address, and a token
// derived from it, so that every rank may call this and get the same id; rank 0 listens there
// when it joins. Otherwise this host's first address that `ifname` (PRIOCCL_SOCKET_IFNAME) lets
// through, a listener bound there on a free port, kept for this process's rank 0, and a random
// token. Throws InvalidArgument (a bad commId) or SystemError.
UniqueIdFields newUniqueId(const std::string& commId, const std::string& ifname);

class TcpBootstrap final : public Bootstrap {
 public:
  // Joins the job `id` names as `rank` of `size`; every step waits at most `timeout` (a rank
  // that never arrives fails the others then, naming it). `listenFd`: a listener made for this
  // group already (split), or -1. `processIds`: the ranks' ids in the first group (empty: 0..).
  TcpBootstrap(const UniqueIdFields& id, int rank, int size, std::chrono::milliseconds timeout,
               int listenFd = -1, std::vector<int> processIds = {});
  ~TcpBootstrap() override;
  TcpBootstrap(const TcpBootstrap&) = delete;
  TcpBootstrap& operator=(const TcpBootstrap&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<int> processIds() const override { return processIds_; }
  bool concurrentCallsAllowed() const override { return true; }
  bool usable() const override { return true; }
  std::vector<std::vector<char>> allGather(const void* data, size_t bytes) override;
  void allReduceMax(std::vector<double>& values) override;
  void barrier() override;
  std::vector<char> sameHost() override;
  void send(int peer, const void* data, size_t bytes) override;
  void recv(int peer, void* data, size_t bytes) override;
  void sendRecv(int to, const void* out, int from, void* in, size_t bytes) override;
  std::unique_ptr<Bootstrap> split(int color, int key) override;
  // The survivors meet at the first survivor's listener (its address is in every rank's table),
  // which answers with a new listener's port; the new group then joins there as any job does,
  // under a token derived from this group's, the shrink's number and the excluded ranks (ranks
  // that disagree on them fail at the deadline instead of forming different groups).
  std::unique_ptr<Bootstrap> shrink(const std::vector<int>& excluded) override;
  // The lowest live rank leads: each caller asks the ranks below it in turn (a refused
  // connection, or one closed unanswered, means that rank is gone); one that finds none below
  // alive leads. The leader takes every rank that asks, and leaves out every rank whose
  // listener refuses a connection (the process is gone) or that has not asked by the deadline;
  // it sends the members and a new listener's port to each, and the group joins there. One rank
  // decides the members, so no two callers can get different ones; a leader that dies before
  // answering is skipped like any gone rank.
  std::unique_ptr<Bootstrap> shrinkToLive() override;

  // This host's key: ranks with equal keys share a machine and its shared memory (boot id, IPC
  // namespace and hostname; never the hostname alone).
  static uint64_t hostKey();

  using Entry = BootstrapEntry;

 private:
  struct PendingHello;
  void closeAll();
  // A new listener on the wildcard address of the id's family, on a free port.
  int listenAnywhere() const;
  void joinAsRoot();
  // One connection's hello, read on: true when it made its rank arrive; else *why says why it
  // must be dropped (empty: it may go on).
  bool readHello(PendingHello& p, std::string* why);
  // Rank 0's deadline passed: the ranks that arrived hear which did not; throws that.
  [[noreturn]] void giveUp(std::vector<PendingHello>& pending);
  void joinAsMember();
  // The connection to `peer` for send/recv (made on first use: the lower rank dials).
  int peerFd(int peer);
  void acceptPeer(int peer);
  // shrink()'s meeting: the first survivor answers every other one with `port`; the others ask.
  void answerShrink(const UniqueIdFields& child, const std::vector<int>& members, uint16_t port);
  uint16_t askShrink(const UniqueIdFields& child, int first, int rank, int size);
  // shrinkToLive's parts: asking rank `leader` (false: it is gone), and leading.
  bool askToLead(const UniqueIdFields& meeting, int leader, Clock::time_point end,
                 std::vector<int>* members, uint16_t* port);
  std::vector<int> leadLiveGroup(const UniqueIdFields& meeting, uint16_t port,
                                 Clock::time_point end);
  // The group of `members` (ranks here, ascending; this one among them) that shrink's meeting
  // agreed on, joined at members[0]'s address and `port` (`listenFd`: the leader's listener).
  std::unique_ptr<Bootstrap> formGroup(const UniqueIdFields& child, const std::vector<int>& members,
                                       uint16_t port, int listenFd);
  // Exactly one framed message of `bytes` each way; both at once, so large ones cannot deadlock.
  void exchange(int toFd, const void* out, int fromFd, void* in, size_t bytes, const char* what,
                int to, int from);
  Clock::time_point deadline() const { return Clock::now() + timeout_; }

  int rank_, size_;
  std::chrono::milliseconds timeout_;
  UniqueIdFields id_;
  std::vector<int> processIds_;
  int listenFd_ = -1;       // rank 0: the id's address; others: their peers' way in
  int rootFd_ = -1;         // not rank 0: the connection to rank 0
  std::vector<int> fds_;    // rank 0: each rank's connection
  std::vector<int> peers_;  // direct connections, by rank (-1: none yet)
  std::vector<Entry> table_;
  uint64_t splits_ = 0;   // split() calls so far: each child group's token differs
  uint64_t shrinks_ = 0;  // shrink() calls so far (the excluded ranks' count stops with them)
};

}  // namespace prioccl
