#include "provider/rdmacm/kernel_rdma_cm.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "emulator/sync/internal_thread.h"
#include "provider/rdmacm/cm_file_table.h"

namespace softverbs::provider {
namespace {

// open(2), write(2) and close(2) of this process are interposed for the
// same path: the kernel's file is reached by the system calls themselves.
int open_kernel_file() {
  return static_cast<int>(
      ::syscall(SYS_openat, AT_FDCWD, kRdmaCmPath, O_RDWR | O_CLOEXEC | O_NONBLOCK));
}

void close_fd(int fd) { ::syscall(SYS_close, fd); }

}  // namespace

std::unique_ptr<KernelRdmaCm> KernelRdmaCm::open() {
  const int fd = open_kernel_file();
  if (fd < 0) return nullptr;
  const int stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (stop_fd < 0) {
    close_fd(fd);
    return nullptr;
  }
  return std::unique_ptr<KernelRdmaCm>(new KernelRdmaCm(fd, stop_fd));
}

KernelRdmaCm::~KernelRdmaCm() {
  const uint64_t one = 1;
  [[maybe_unused]] long done = ::syscall(SYS_write, stop_fd_, &one, sizeof one);
  if (events_.joinable()) events_.join();
  close_fd(fd_);
  close_fd(stop_fd_);
}

int KernelRdmaCm::command(uint32_t command, const void* in, uint16_t in_length,
                          uint16_t out_length) {
  std::vector<uint8_t> bytes(sizeof(rdma_ucm_cmd_hdr) + in_length);
  const rdma_ucm_cmd_hdr header{command, in_length, out_length};
  std::memcpy(bytes.data(), &header, sizeof header);
  std::memcpy(bytes.data() + sizeof header, in, in_length);
  long written;
  do {
    written = ::syscall(SYS_write, fd_, bytes.data(), bytes.size());
  } while (written < 0 && errno == EINTR);
  return written < 0 ? errno : 0;
}

void KernelRdmaCm::start_events(EventHandler handler) {
  if (events_.joinable()) return;
  handler_ = std::move(handler);
  events_ = start_internal_thread([this] { pump_events(); });
}

// The file is non-blocking: poll it beside the stop eventfd, then take
// every event waiting.
void KernelRdmaCm::pump_events() {
  while (true) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    while (true) {
      rdma_ucm_event_resp event{};
      rdma_ucm_get_event get{};
      get.response = reinterpret_cast<uintptr_t>(&event);
      if (command(RDMA_USER_CM_CMD_GET_EVENT, &get, sizeof get, sizeof event) != 0) break;
      handler_(event);
    }
  }
}

}  // namespace softverbs::provider
