// A process may end while its threads wait on the fds of verbs objects
// (ibv_get_cq_event(3), ibv_get_async_event(3), poll(2) on those fds) or
// still post and poll: with a kernel provider the objects stay valid until
// the process is gone, the waiting threads simply never return, and the
// process exits with the status it asked for. So must it on any device:
// nothing a thread can still reach may be torn down under it at exit,
// whichever thread calls exit(3). Each case runs conformance_exit_child,
// a program of its own beside this one; a signal, a hang or another exit
// status fails it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <thread>

#include "harness/testsupport/test_config.h"

namespace softverbs::conformance {
namespace {

using softverbs::testsupport::test_config;

constexpr int kExitStatus = 42;  // what the child asks exit() for
constexpr int kRuns = 5;
constexpr auto kChildDeadline = std::chrono::seconds(20);

// The child program: beside this one.
std::string child_path() {
  char self[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
  if (length <= 0) return "";
  std::string path(self, static_cast<size_t>(length));
  return path.substr(0, path.rfind('/') + 1) + "conformance_exit_child";
}

// Runs the child on the device under test and returns how it ended, in
// words ("" when it exited with kExitStatus).
std::string run_child(const char* which) {
  const std::string path = child_path();
  if (access(path.c_str(), X_OK) != 0) return path + " is missing: build conformance_exit_child";
  const std::string device = "--device=" + test_config().device_name;
  const std::string gid_index = "--gid-index=" + std::to_string(test_config().gid_index);
  const pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    execl(path.c_str(), path.c_str(), device.c_str(), gid_index.c_str(), which,
          static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + kChildDeadline;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return "the process did not end: exit hung";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  if (WEXITSTATUS(status) != kExitStatus)
    return "exit status " + std::to_string(WEXITSTATUS(status));
  return "";
}

TEST(ExitWithWaitingThreads, ExitFromMainWhileThreadsWaitOnEventFds) {
  for (int run = 0; run < kRuns; ++run) EXPECT_EQ("", run_child("main")) << run;
}

TEST(ExitWithWaitingThreads, ExitFromAnotherThreadWhileMainWaitsForACqEvent) {
  for (int run = 0; run < kRuns; ++run) EXPECT_EQ("", run_child("other-thread")) << run;
}

// A worker thread that keeps posting and polling while main exits: with a
// kernel provider its QPs, CQ and memory stay until the process is gone.
TEST(ExitWithWaitingThreads, ExitWhileAThreadPostsAndPolls) {
  for (int run = 0; run < kRuns; ++run) EXPECT_EQ("", run_child("worker")) << run;
}

}  // namespace
}  // namespace softverbs::conformance
