#include "emulator/control/control_server.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "emulator/control/control_socket.h"
#include "emulator/sync/internal_thread.h"

namespace softverbs::control {
namespace {

constexpr size_t kMaxRequestBytes = 64 * 1024;

std::string read_request(int fd) {
  std::string request;
  char buf[1024];
  while (request.size() < kMaxRequestBytes) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) break;
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    request.append(buf, static_cast<size_t>(n));
    if (request.find('\n') != std::string::npos) break;
  }
  if (auto nl = request.find('\n'); nl != std::string::npos) request.resize(nl);
  return request;
}

void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

std::unique_ptr<ControlServer> ControlServer::start(Handler handler, std::string& error) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return nullptr;
  }
  const std::string name = socket_name(getpid());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), std::min(name.size(), sizeof(addr.sun_path) - 2));
  auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 8) != 0) {
    error = "control socket @" + name + ": " + std::strerror(errno);
    close(fd);
    return nullptr;
  }
  return std::unique_ptr<ControlServer>(new ControlServer(fd, std::move(handler)));
}

ControlServer::ControlServer(int fd, Handler handler)
    : fd_(fd), stop_fd_(eventfd(0, EFD_CLOEXEC)), handler_(std::move(handler)) {
  thread_ = start_internal_thread([this] { serve(); });
}

ControlServer::~ControlServer() {
  stopping_.store(true);
  const uint64_t one = 1;
  if (stop_fd_ >= 0 && write(stop_fd_, &one, sizeof one) < 0) {
    // Nothing to do: without the eventfd the thread polls with a timeout.
  }
  if (thread_.joinable()) thread_.join();
  close(fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
}

void ControlServer::serve() {
  pthread_setname_np(pthread_self(), "softverbs-ctl");
  // Sleeps until a request or shutdown: an idle process pays no wake-ups
  // for its control socket.
  const int timeout_ms = stop_fd_ >= 0 ? -1 : 200;
  while (!stopping_.load()) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(p, stop_fd_ >= 0 ? 2 : 1, timeout_ms) <= 0 || !(p[0].revents & POLLIN)) continue;
    int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    // Abstract sockets have no file permissions: check who is asking.
    ucred cred{};
    socklen_t cred_len = sizeof cred;
    if (getsockopt(client, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0 ||
        cred.uid != geteuid()) {
      write_all(client, "error: only the process's own user may control it\n");
      close(client);
      continue;
    }
    write_all(client, handler_(read_request(client)));
    close(client);
  }
}

}  // namespace softverbs::control
