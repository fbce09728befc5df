#include "conformance/cm/forked_peer.h"

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
#include <thread>

namespace softverbs::conformance::cm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kSkippedExitCode = 77;
constexpr int kDeadlineExitCode = 124;

// What the SIGALRM handler prints: prepared before, written with write(2).
char g_deadline_message[160];

void on_deadline(int) {
  ssize_t ignored = write(STDOUT_FILENO, g_deadline_message, std::strlen(g_deadline_message));
  (void)ignored;
  _exit(kDeadlineExitCode);
}

void arm_deadline(const std::string& role, std::chrono::seconds deadline) {
  std::snprintf(g_deadline_message, sizeof g_deadline_message,
                "\n[cm %s, pid %d] deadline of %lld s passed: exiting as failed\n", role.c_str(),
                static_cast<int>(getpid()), static_cast<long long>(deadline.count()));
  signal(SIGALRM, on_deadline);
  alarm(static_cast<unsigned>(deadline.count()));
}

// The skip message the current test recorded, if it skipped.
std::string skip_message() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) return {};
  const ::testing::TestResult* result = info->result();
  for (int i = 0; i < result->total_part_count(); ++i) {
    const ::testing::TestPartResult& part = result->GetTestPartResult(i);
    if (part.skipped()) return part.message();
  }
  return {};
}

int child_exit_code() {
  if (::testing::Test::HasFailure()) return 1;
  if (::testing::Test::IsSkipped()) return kSkippedExitCode;
  return 0;
}

[[noreturn]] void run_child(int fd, pid_t parent_pid, const std::string& role,
                            const PeerBody& body, std::chrono::seconds deadline) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent_pid) _exit(2);  // the parent died before prctl
  arm_deadline(role, deadline);
  int code;
  {
    PeerLink link(fd);
    body(link);
    code = child_exit_code();
    if (code == kSkippedExitCode) link.send_text(skip_message());
  }
  std::fflush(nullptr);
  // exit(), not _exit(): the libraries' exit-time cleanup runs as at the end
  // of any program (a soft device's shared memory, for one).
  std::exit(code);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) {
    if (WEXITSTATUS(status) == kDeadlineExitCode) return "passed its deadline";
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "ended with wait status " + std::to_string(status);
}

}  // namespace

PeerLink::~PeerLink() { close(fd_); }

::testing::AssertionResult PeerLink::send_bytes(const void* data, size_t length) {
  const auto* bytes = static_cast<const char*>(data);
  while (length > 0) {
    ssize_t sent = ::send(fd_, bytes, length, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0)
      return ::testing::AssertionFailure() << "sending to the peer process: " << strerror(errno);
    bytes += sent;
    length -= static_cast<size_t>(sent);
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult PeerLink::receive_bytes(void* data, size_t length,
                                                   std::chrono::milliseconds timeout) {
  auto* bytes = static_cast<char*>(data);
  const auto until = Clock::now() + timeout;
  while (length > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    pollfd p{fd_, POLLIN, 0};
    int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0)
      return ::testing::AssertionFailure()
             << "the peer process sent nothing within " << timeout.count() << " ms";
    ssize_t got = ::recv(fd_, bytes, length, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0)
      return ::testing::AssertionFailure() << "the peer process closed the link (did it fail?)";
    if (got < 0)
      return ::testing::AssertionFailure() << "receiving from the peer: " << strerror(errno);
    bytes += got;
    length -= static_cast<size_t>(got);
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult PeerLink::send_text(const std::string& text) {
  const uint32_t length = static_cast<uint32_t>(text.size());
  auto sent = send(length);
  if (!sent) return sent;
  return send_bytes(text.data(), text.size());
}

::testing::AssertionResult PeerLink::receive_text(std::string& text,
                                                  std::chrono::milliseconds timeout) {
  uint32_t length = 0;
  auto got = receive(length, timeout);
  if (!got) return got;
  text.assign(length, '\0');
  return receive_bytes(text.data(), length, timeout);
}

::testing::AssertionResult PeerLink::wait_for(uint32_t step, std::chrono::milliseconds timeout) {
  uint32_t got = 0;
  auto received = receive(got, timeout);
  if (!received) return received << " (waiting for step " << step << ")";
  if (got != step)
    return ::testing::AssertionFailure() << "the peer reached step " << got << ", expected " << step;
  return ::testing::AssertionSuccess();
}

ForkedPeer::ForkedPeer(std::string role, const PeerBody& body, std::chrono::seconds deadline)
    : role_(std::move(role)) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    ADD_FAILURE() << "socketpair: " << strerror(errno);
    link_ = std::make_unique<PeerLink>(-1);
    return;
  }
  std::fflush(nullptr);  // or the child prints the parent's buffered output again
  const pid_t parent_pid = getpid();
  pid_ = fork();
  if (pid_ == 0) {
    close(fds[0]);
    run_child(fds[1], parent_pid, role_, body, deadline);
  }
  close(fds[1]);
  if (pid_ < 0) ADD_FAILURE() << "fork: " << strerror(errno);
  link_ = std::make_unique<PeerLink>(fds[0]);
}

ForkedPeer::~ForkedPeer() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

void ForkedPeer::kill_now() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

::testing::AssertionResult ForkedPeer::join(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return ::testing::AssertionFailure() << "the " << role_ << " process never ran";
  const auto until = Clock::now() + timeout;
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(pid_, &status, WNOHANG)) == 0 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (done == 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return ::testing::AssertionFailure()
           << "the " << role_ << " process did not finish within " << timeout.count()
           << " ms and was killed";
  }
  pid_ = -1;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (exit_code_ == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "the " << role_ << " process " << describe_wait_status(status)
         << " (its failures are printed above)";
}

void run_in_fresh_process(const std::function<void()>& body, std::chrono::seconds deadline) {
  ForkedPeer test_process("test", [&](PeerLink&) { body(); }, deadline);
  auto joined = test_process.join(deadline + 10s);
  if (test_process.exit_code() == kSkippedExitCode) {
    std::string reason;
    test_process.link().receive_text(reason, 1s);
    GTEST_SKIP() << reason;
  }
  EXPECT_TRUE(joined);
}

}  // namespace softverbs::conformance::cm
