// The kernel's own rdma_cm device file, for the ids of a real RDMA device
// (an HCA, rxe, siw) that an rdma_cm file of this process forwards to it
// (cm_file_forwarding.cc). Commands are written to it as librdmacm writes
// them, bypassing the interposed libc calls; its events are read by a
// thread of its own and handed to the rdma_cm file, which queues them
// beside the soft devices' events on the one fd librdmacm polls.
#pragma once

#include <rdma/rdma_user_cm.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

namespace softverbs::provider {

class KernelRdmaCm {
 public:
  using EventHandler = std::function<void(const rdma_ucm_event_resp&)>;

  // Opens the kernel's file; null when the kernel has none (no rdma_ucm).
  static std::unique_ptr<KernelRdmaCm> open();
  // Stops the event thread and closes the file, which destroys every
  // kernel id still on it.
  ~KernelRdmaCm();
  KernelRdmaCm(const KernelRdmaCm&) = delete;
  KernelRdmaCm& operator=(const KernelRdmaCm&) = delete;

  int fd() const { return fd_; }

  // Writes one command: the header, then `in_length` bytes of `in`. 0, or
  // the errno the kernel gave.
  int command(uint32_t command, const void* in, uint16_t in_length, uint16_t out_length);

  // From now until destruction, `handler` runs on the event thread for
  // every event the kernel reports. Once.
  void start_events(EventHandler handler);

 private:
  KernelRdmaCm(int fd, int stop_fd) : fd_(fd), stop_fd_(stop_fd) {}
  void pump_events();

  const int fd_;
  const int stop_fd_;  // an eventfd: readable once the file closes
  EventHandler handler_;
  std::thread events_;
};

}  // namespace softverbs::provider
