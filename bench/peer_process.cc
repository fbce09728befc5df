#include "bench/peer_process.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <new>

#include "bench/peer_tasks.h"

namespace softverbs::bench {
namespace {

std::unique_ptr<PeerProcess> g_peer;
std::string g_gone_reason = "the peer process was not started";

}  // namespace

bool PeerProcess::start(std::string& error) {
  void* shared = ::mmap(nullptr, sizeof(SharedCacheLine), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    error = std::string("mmap: ") + std::strerror(errno);
    return false;
  }
  auto* line = new (shared) SharedCacheLine;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    error = std::string("socketpair: ") + std::strerror(errno);
    return false;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    error = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  if (pid == 0) {
    ::close(fds[0]);
    Channel channel(fds[1]);
    serve_peer_requests(channel, *line);
    ::_exit(0);
  }
  ::close(fds[1]);
  g_peer.reset(new PeerProcess);
  g_peer->channel_ = Channel(fds[0]);
  g_peer->cache_line_ = line;
  g_peer->pid_ = pid;
  return true;
}

PeerProcess* PeerProcess::get() { return g_peer.get(); }

const std::string& PeerProcess::gone_reason() { return g_gone_reason; }

void PeerProcess::stop() {
  if (!g_peer) return;
  g_peer->channel_.send(PeerRequest{PeerTask::kQuit, 0, 0});
  int status = 0;
  ::waitpid(g_peer->pid_, &status, 0);
  g_peer.reset();
  g_gone_reason = "the peer process has quit";
}

void PeerProcess::abandon(const std::string& why) {
  if (!g_peer) return;
  ::kill(g_peer->pid_, SIGKILL);
  int status = 0;
  ::waitpid(g_peer->pid_, &status, 0);
  g_peer.reset();
  g_gone_reason = "the peer process was stopped after an earlier failure: " + why;
}

}  // namespace softverbs::bench
