#include "emulator/control/control_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "emulator/wire/shm_names.h"

namespace softverbs::control {
namespace {

// Requests and replies are small; a stuck peer must not hang the CLI.
constexpr int kIoTimeoutMs = 5000;

sockaddr_un address_of(const std::string& name, socklen_t& len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  addr.sun_path[0] = '\0';
  std::memcpy(addr.sun_path + 1, name.data(), std::min(name.size(), sizeof(addr.sun_path) - 2));
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return addr;
}

}  // namespace

std::string socket_name(pid_t pid) {
  return shm_user_stem() + "ctl-" + std::to_string(pid);
}

std::vector<pid_t> list_processes() {
  std::vector<pid_t> pids;
  std::ifstream unix_table("/proc/net/unix");
  const std::string stem = "@" + shm_user_stem() + "ctl-";
  std::string line;
  while (std::getline(unix_table, line)) {
    auto at = line.find(stem);
    if (at == std::string::npos) continue;
    std::string rest = line.substr(at + stem.size());
    char* end = nullptr;
    long pid = std::strtol(rest.c_str(), &end, 10);
    if (end != rest.c_str() && pid > 0) pids.push_back(static_cast<pid_t>(pid));
  }
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

bool request(pid_t pid, const std::string& line, std::string& reply, std::string& error) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  socklen_t len;
  sockaddr_un addr = address_of(socket_name(pid), len);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    error = "process " + std::to_string(pid) +
            " has no softverbs control socket (is it running a program under softverbs, as "
            "this user, with the same SOFTVERBS_SHM_PREFIX?)";
    close(fd);
    return false;
  }
  std::string out = line + "\n";
  if (write(fd, out.data(), out.size()) != static_cast<ssize_t>(out.size())) {
    error = std::string("write: ") + std::strerror(errno);
    close(fd);
    return false;
  }
  shutdown(fd, SHUT_WR);
  reply.clear();
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, kIoTimeoutMs) <= 0) {
      error = "process " + std::to_string(pid) + " did not answer within 5 s";
      close(fd);
      return false;
    }
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return true;
}

}  // namespace softverbs::control
