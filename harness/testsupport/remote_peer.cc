#include "harness/testsupport/remote_peer.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "harness/testsupport/peer_channel.h"
#include "harness/testsupport/remote_endpoint.h"
#include "harness/testsupport/test_config.h"

namespace softverbs::testsupport {
namespace {

using Clock = std::chrono::steady_clock;

// Sent first on every connection, before the channel's frames: tells a
// peer server what it talks to and how long its peer may live.
struct PeerHello {
  char magic[8];
  char service[32];
  uint32_t argument;
  uint32_t deadline_seconds;
};
constexpr char kHelloMagic[8] = {'s', 'v', 'p', 'e', 'e', 'r', '0', '1'};
// A connection that says nothing for this long is not a test run.
constexpr int kHelloTimeoutMs = 5000;
constexpr std::chrono::seconds kPeerAlarmGrace{10};
constexpr std::chrono::milliseconds kPeerExitPatience{1000};
constexpr size_t kMaxServices = 16;

struct ServiceEntry {
  const char* name;
  PeerService service;
};
struct ServiceTable {
  ServiceEntry entries[kMaxServices];
  size_t count = 0;
};

ServiceTable& services() {
  static ServiceTable table;
  return table;
}

PeerService find_service(std::string_view name) {
  for (size_t i = 0; i < services().count; ++i)
    if (name == services().entries[i].name) return services().entries[i].service;
  return nullptr;
}

PeerOutcome serve_endpoint_service(PeerChannel& channel, uint32_t) {
  return serve_endpoint(channel);
}
[[maybe_unused]] const bool kEndpointRegistered =
    register_peer_service("endpoint", serve_endpoint_service);

int connect_to(const std::string& peer, std::string& why) {
  const size_t colon = peer.rfind(':');
  std::string host = peer.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), peer.c_str() + colon + 1, &hints, &found); rc != 0) {
    why = "peer '" + peer + "': " + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  Errno last = 0;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      last = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    why = "no peer server at " + peer + " (" + describe_errno(last) +
          "); start one there with `conformance_tests --serve-peers PORT`";
    return -1;
  }
  const int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  return fd;
}

bool write_hello(int fd, const char* service, uint32_t argument, std::chrono::seconds deadline) {
  PeerHello hello{};
  std::memcpy(hello.magic, kHelloMagic, sizeof hello.magic);
  std::strncpy(hello.service, service, sizeof hello.service - 1);
  hello.argument = argument;
  hello.deadline_seconds = static_cast<uint32_t>(deadline.count());
  return send(fd, &hello, sizeof hello, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof hello);
}

bool read_hello(int fd, PeerHello& hello) {
  pollfd pfd{fd, POLLIN, 0};
  if (poll(&pfd, 1, kHelloTimeoutMs) != 1) return false;
  return recv(fd, &hello, sizeof hello, MSG_WAITALL) == static_cast<ssize_t>(sizeof hello) &&
         std::memcmp(hello.magic, kHelloMagic, sizeof hello.magic) == 0 &&
         hello.deadline_seconds > 0 && hello.deadline_seconds <= 86400 &&
         std::memchr(hello.service, '\0', sizeof hello.service) != nullptr;
}

// One test's peer, in a process of its own that ends with the server.
[[noreturn]] void serve_one(int fd, pid_t server_pid) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != server_pid) _exit(2);
  PeerHello hello{};
  if (!read_hello(fd, hello)) _exit(2);
  const std::chrono::seconds deadline{hello.deadline_seconds};
  alarm(static_cast<unsigned>((deadline + kPeerAlarmGrace).count()));
  const int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  PeerOutcome outcome;
  {
    PeerChannel channel(fd, Clock::now() + deadline);
    const PeerService service = find_service(hello.service);
    outcome = service ? service(channel, hello.argument)
                      : PeerOutcome::fail(std::string("this build has no peer service '") +
                                          hello.service + "'; run the same build on both hosts");
    channel.send_outcome(outcome);
  }
  std::printf("peer %d (%s): %s\n", getpid(), hello.service,
              outcome.passed ? "done" : outcome.message.c_str());
  std::exit(outcome.passed ? 0 : 1);
}

int listen_on(uint16_t port) {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int on = 1, off = 0;
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(port);
    a.sin6_addr = in6addr_any;
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && listen(fd, 16) == 0)
      return fd;
    close(fd);
  }
  // A host without IPv6.
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && listen(fd, 16) == 0) return fd;
  const Errno err = errno;
  close(fd);
  errno = err;
  return -1;
}

// Waits until the peers served so far are gone, for up to `patience`: a
// peer that is still exiting holds its device's sockets, and on the UDP
// wire the kernel may hand it datagrams meant for the next test's peer
// (docs/udp-wire.md). A peer still serving (a test with two at once) is
// waited for no longer than that.
void wait_for_served_peers(std::chrono::milliseconds patience) {
  const auto until = Clock::now() + patience;
  for (;;) {
    const pid_t pid = waitpid(-1, nullptr, WNOHANG);
    if (pid > 0) continue;
    if (pid < 0 && errno == ECHILD) return;  // none left
    if (Clock::now() >= until) return;
    usleep(2000);
  }
}

// Connects to the peer server `peer` (HOST:PORT) and runs `parent` against
// the service it runs there.
PeerOutcome run_with_remote_peer(const std::string& peer, const char* service, uint32_t argument,
                                 const ParentBody& parent, std::chrono::seconds deadline) {
  std::string why;
  const int fd = connect_to(peer, why);
  if (fd < 0) return PeerOutcome::fail(why);
  if (!write_hello(fd, service, argument, deadline)) {
    close(fd);
    return PeerOutcome::fail("peer server " + peer + " closed the connection");
  }
  PeerOutcome outcome;
  Errno err = 0;
  {
    PeerChannel channel(fd, Clock::now() + deadline);
    parent(channel);
    channel.finish_sending();
    err = channel.receive_outcome(outcome);
  }
  if (err)
    return PeerOutcome::fail("the peer on " + peer + " sent no outcome (" + describe_errno(err) +
                             ")");
  return outcome;
}

}  // namespace

bool register_peer_service(const char* name, PeerService service) {
  ServiceTable& table = services();
  if (table.count == kMaxServices || std::strlen(name) >= sizeof PeerHello{}.service) std::abort();
  table.entries[table.count++] = {name, service};
  return true;
}

PeerOutcome run_with_peer_service(const char* name, uint32_t argument, const ParentBody& parent,
                                  std::chrono::seconds deadline) {
  if (peer_is_remote())
    return run_with_remote_peer(test_config().peer, name, argument, parent, deadline);
  const PeerService service = find_service(name);
  if (!service) return PeerOutcome::fail(std::string("no peer service '") + name + "'");
  return run_with_forked_peer(
      [service, argument](PeerChannel& channel) { return service(channel, argument); }, parent,
      deadline);
}

PeerOutcome run_with_endpoint_peer(const ParentBody& parent, std::chrono::seconds deadline) {
  return run_with_peer_service("endpoint", 0, parent, deadline);
}

int serve_remote_peers(uint16_t port, std::chrono::seconds lifetime) {
  const int listener = listen_on(port);
  if (listener < 0) {
    std::fprintf(stderr, "conformance_tests: cannot listen on TCP port %u: %s\n", port,
                 std::strerror(errno));
    return 1;
  }
  std::printf("serving test peers on TCP port %u for %lld s (device %s)\n", port,
              static_cast<long long>(lifetime.count()), test_config().device_name.c_str());
  std::fflush(stdout);
  const pid_t server_pid = getpid();
  const auto until = Clock::now() + lifetime;
  while (Clock::now() < until) {
    pollfd pfd{listener, POLLIN, 0};
    if (poll(&pfd, 1, 500) != 1) {
      wait_for_served_peers(std::chrono::milliseconds(0));  // reaps the finished
      continue;
    }
    const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    wait_for_served_peers(kPeerExitPatience);
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      close(listener);
      serve_one(fd, server_pid);
    }
    close(fd);
  }
  close(listener);
  // Peers still serving die with the server (PR_SET_PDEATHSIG).
  return 0;
}

}  // namespace softverbs::testsupport
