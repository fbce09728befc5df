// The namespaces are made with iproute2's `ip`, as a user would by hand;
// `exec` enters one itself (setns) so that the program it runs is a child of
// nobody but the caller.
#include "harness/cli/topo_command.h"

#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "harness/cli/exit_codes.h"
#include "harness/cli/usage.h"

extern char** environ;

namespace softverbs::cli {
namespace {

constexpr int kMaxHosts = 32;
constexpr const char* kNetnsDirectory = "/run/netns/";

struct Topology {
  std::string name = "sv";
  // Jumbo frames, as RoCE networks are usually built: a 4096-byte IB MTU
  // fits (1500 gives 1024).
  int mtu = 9000;
  std::string fabric() const { return name + "-fabric"; }
  std::string host(int n) const { return name + "-host" + std::to_string(n); }
};

// RFC 2544's benchmarking range and a unique-local IPv6 prefix: addresses no
// real network routes.
std::string ipv4_of(int n) { return "198.18.0." + std::to_string(n); }
std::string ipv6_of(int n) { return "fd00:5376::" + std::to_string(n); }

bool namespace_exists(const std::string& ns) {
  struct stat st;
  return stat((kNetnsDirectory + ns).c_str(), &st) == 0;
}

// Runs `ip ARGS...`; true when it exits 0.
bool ip(std::vector<std::string> args) {
  args.insert(args.begin(), "ip");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, "ip", nullptr, nullptr, argv.data(), environ) != 0) {
    std::fprintf(stderr,
                 "softverbs: topo: cannot run 'ip' (iproute2): install it with "
                 "'apt-get install iproute2'\n");
    return false;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool needs_root(const char* what) {
  if (geteuid() == 0) return false;
  std::fprintf(stderr,
               "softverbs: topo %s: making and entering network namespaces needs root "
               "(CAP_SYS_ADMIN and CAP_NET_ADMIN); run it with sudo, or as root in a "
               "container started with --privileged\n",
               what);
  return true;
}

int topo_down(const Topology& t) {
  if (needs_root("down")) return kExitFailure;
  bool ok = true;
  for (int n = 1; n <= kMaxHosts; ++n)
    if (namespace_exists(t.host(n))) ok = ip({"netns", "del", t.host(n)}) && ok;
  if (namespace_exists(t.fabric())) ok = ip({"netns", "del", t.fabric()}) && ok;
  return ok ? kExitSuccess : kExitFailure;
}

bool add_host(const Topology& t, int n) {
  const std::string ns = t.host(n);
  const std::string fabric_side = "h" + std::to_string(n);
  return ip({"netns", "add", ns}) &&
         ip({"link", "add", fabric_side, "netns", t.fabric(), "type", "veth", "peer", "name",
             "sv0", "netns", ns}) &&
         ip({"-n", t.fabric(), "link", "set", fabric_side, "mtu", std::to_string(t.mtu),
             "master", "br0", "up"}) &&
         ip({"-n", ns, "link", "set", "lo", "up"}) &&
         ip({"-n", ns, "addr", "add", ipv4_of(n) + "/24", "dev", "sv0"}) &&
         ip({"-n", ns, "addr", "add", ipv6_of(n) + "/64", "dev", "sv0", "nodad"}) &&
         ip({"-n", ns, "link", "set", "sv0", "mtu", std::to_string(t.mtu), "up"});
}

int topo_up(const Topology& t, int hosts) {
  if (needs_root("up")) return kExitFailure;
  if (namespace_exists(t.fabric())) {
    std::fprintf(stderr,
                 "softverbs: topo up: topology '%s' exists; 'softverbs topo down --name %s' "
                 "removes it\n",
                 t.name.c_str(), t.name.c_str());
    return kExitFailure;
  }
  bool ok = ip({"netns", "add", t.fabric()}) &&
            ip({"-n", t.fabric(), "link", "add", "br0", "type", "bridge"}) &&
            ip({"-n", t.fabric(), "link", "set", "br0", "mtu", std::to_string(t.mtu), "up"});
  for (int n = 1; ok && n <= hosts; ++n) ok = add_host(t, n);
  if (!ok) {
    std::fprintf(stderr, "softverbs: topo up: failed; removing what was made\n");
    topo_down(t);
    return kExitFailure;
  }
  for (int n = 1; n <= hosts; ++n)
    std::printf("%s  %s  %s\n", t.host(n).c_str(), ipv4_of(n).c_str(), ipv6_of(n).c_str());
  return kExitSuccess;
}

int topo_show(const Topology& t) {
  if (!namespace_exists(t.fabric())) {
    std::printf("no topology '%s' ('softverbs topo up N' makes one)\n", t.name.c_str());
    return kExitSuccess;
  }
  for (int n = 1; n <= kMaxHosts; ++n)
    if (namespace_exists(t.host(n)))
      std::printf("%s  %s  %s\n", t.host(n).c_str(), ipv4_of(n).c_str(), ipv6_of(n).c_str());
  return kExitSuccess;
}

// Enters host n's network namespace, gives it its own registry and runs
// the program in its place.
int topo_exec(const Topology& t, int n, std::span<char* const> program) {
  if (needs_root("exec")) return kExitFailure;
  const std::string ns = t.host(n);
  const int fd = open((kNetnsDirectory + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::fprintf(stderr, "softverbs: topo exec: no host %s ('softverbs topo up' makes it)\n",
                 ns.c_str());
    return kExitFailure;
  }
  if (setns(fd, CLONE_NEWNET) != 0) {
    std::fprintf(stderr, "softverbs: topo exec: entering %s: %s\n", ns.c_str(),
                 std::strerror(errno));
    return kExitFailure;
  }
  close(fd);
  const char* prefix = std::getenv("SOFTVERBS_SHM_PREFIX");
  const std::string own = std::string(prefix && *prefix ? prefix : "softverbs") + "-" + ns;
  setenv("SOFTVERBS_SHM_PREFIX", own.c_str(), 1);
  std::vector<char*> argv(program.begin(), program.end());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  const int err = errno;
  std::fprintf(stderr, "softverbs: topo exec: %s: %s\n", argv[0], std::strerror(err));
  return err == ENOENT ? kExitNotFound : kExitCannotExecute;
}

bool parse_count(std::string_view text, int& value) {
  if (text.empty() || text.size() > 2) return false;
  value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  return value >= 1 && value <= kMaxHosts;
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 16) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

}  // namespace

int topo_command(std::span<char* const> args) {
  constexpr std::string_view kHint =
      "type: softverbs topo [--name NAME] up N [--mtu BYTES] | down | show | "
      "exec N -- PROGRAM [ARGS...]";
  Topology t;
  size_t i = 0;
  if (i < args.size() && std::string_view(args[i]) == "--name") {
    if (i + 1 >= args.size() || !valid_name(args[i + 1]))
      return usage_error("topo: --name takes up to 16 letters, digits, '-' or '_'", kHint);
    t.name = args[i + 1];
    i += 2;
  }
  if (i >= args.size()) return usage_error("topo: say up, down, show or exec", kHint);
  const std::string_view verb = args[i++];
  if (verb == "-h" || verb == "--help") {
    print_topo_usage(stdout);
    return kExitSuccess;
  }
  if (verb == "down" || verb == "show") {
    if (i != args.size()) return usage_error("topo " + std::string(verb) + ": unexpected argument", kHint);
    return verb == "down" ? topo_down(t) : topo_show(t);
  }
  if (verb != "up" && verb != "exec")
    return usage_error("topo: unknown action '" + std::string(verb) + "'", kHint);
  int n = 0;
  if (i >= args.size() || !parse_count(args[i], n))
    return usage_error("topo " + std::string(verb) + ": give a host number from 1 to " +
                           std::to_string(kMaxHosts),
                       kHint);
  ++i;
  if (verb == "up") {
    if (i + 2 == args.size() && std::string_view(args[i]) == "--mtu") {
      char* end = nullptr;
      t.mtu = static_cast<int>(std::strtol(args[i + 1], &end, 10));
      if (*end || t.mtu < 1280 || t.mtu > 9000)
        return usage_error("topo up: --mtu takes a size from 1280 to 9000 bytes", kHint);
      i += 2;
    }
    if (i != args.size()) return usage_error("topo up: unexpected argument", kHint);
    return topo_up(t, n);
  }
  if (i < args.size() && std::string_view(args[i]) == "--") ++i;
  if (i >= args.size()) return usage_error("topo exec: no program given", kHint);
  return topo_exec(t, n, args.subspan(i));
}

}  // namespace softverbs::cli
