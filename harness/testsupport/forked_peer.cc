#include "harness/testsupport/forked_peer.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

namespace softverbs::testsupport {
namespace {

using Clock = std::chrono::steady_clock;

// Lets the parent notice the deadline and report before the child's own
// alarm fires.
constexpr std::chrono::seconds kChildAlarmGrace{10};

[[noreturn]] void run_child(int fd, pid_t parent_pid, const ChildBody& body,
                            std::chrono::seconds deadline) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);  // describe_threads, under Yama's ptrace scope 1
  if (getppid() != parent_pid) _exit(2);  // the parent died before prctl
  alarm(static_cast<unsigned>((deadline + kChildAlarmGrace).count()));

  PeerOutcome outcome;
  {
    PeerChannel channel(fd, Clock::now() + deadline);
    try {
      outcome = body(channel);
    } catch (const std::exception& e) {
      outcome = PeerOutcome::fail(std::string("exception: ") + e.what());
    } catch (...) {
      outcome = PeerOutcome::fail("unknown exception");
    }
    channel.send_outcome(outcome);
  }
  // exit(), not _exit(): the child ends as a program does, so the exit-time
  // cleanup of the libraries it used runs (a soft device's shared-memory
  // segments, for one). stdio was flushed before fork, so nothing inherited
  // is printed twice.
  std::exit(outcome.passed ? 0 : 1);
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "child exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "child killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "child ended with wait status " + std::to_string(status);
}

// What each thread of a hung child is doing, so a hang that happened once
// in CI can be read afterwards: its stacks through gdb when installed, else
// the kernel's view of each thread (where it sleeps, which system call).
std::string describe_threads(pid_t pid) {
  const std::string id = std::to_string(pid);
  std::string command = "if command -v gdb >/dev/null; then timeout 60 gdb -q -batch -nx -p " +
                        id + " -ex 'thread apply all bt 24' 2>&1 | grep -E '^(Thread|#)'; " +
                        "else for t in /proc/" + id + "/task/*; do echo \"$t $(cat $t/comm) " +
                        "$(cat $t/wchan) syscall $(cut -d' ' -f1 $t/syscall)\"; done; fi";
  std::string text;
  if (FILE* out = popen(command.c_str(), "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, out) && text.size() < 64 * 1024) text += line;
    pclose(out);
  }
  return text;
}

// Waits for the child until the deadline, then kills it. Returns its status.
int reap_child(pid_t pid, Clock::time_point deadline, bool& killed, std::string& threads) {
  killed = false;
  int status = 0;
  for (;;) {
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0 && errno != EINTR) return 0;
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  threads = describe_threads(pid);
  kill(pid, SIGKILL);
  killed = true;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

PeerOutcome run_with_forked_peer(const ChildBody& child, const ParentBody& parent,
                                 std::chrono::seconds deadline) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    return PeerOutcome::fail("socketpair: " + describe_errno(errno));

  // Unflushed output would otherwise be printed twice.
  std::fflush(nullptr);
  const pid_t parent_pid = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    Errno err = errno;
    close(fds[0]);
    close(fds[1]);
    return PeerOutcome::fail("fork: " + describe_errno(err));
  }
  if (pid == 0) {
    close(fds[0]);
    run_child(fds[1], parent_pid, child, deadline);
  }
  close(fds[1]);

  const auto until = Clock::now() + deadline;
  PeerOutcome outcome;
  Errno channel_err = 0;
  {
    PeerChannel channel(fds[0], until);
    parent(channel);
    channel.finish_sending();
    channel_err = channel.receive_outcome(outcome);
  }
  bool killed = false;
  std::string threads;
  int status = reap_child(pid, until, killed, threads);
  if (killed) {
    return PeerOutcome::fail("child did not finish within " + std::to_string(deadline.count()) +
                             " s and was killed" +
                             (channel_err ? "" : "; it had reported: " + outcome.message) +
                             "; its threads were:\n" + threads);
  }
  if (channel_err) {
    return PeerOutcome::fail("child sent no outcome (" + describe_errno(channel_err) + "); " +
                             describe_exit(status));
  }
  if (WIFSIGNALED(status)) {
    return PeerOutcome::fail(describe_exit(status) + " after reporting: " +
                             (outcome.passed ? "pass" : outcome.message));
  }
  return outcome;
}

}  // namespace softverbs::testsupport
