// What the load runs do with devices and child processes: open a device by
// name, wait for a child until a deadline.
#pragma once

#include <infiniband/verbs.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

namespace softverbs::load {

// The named device opened, or nullptr (errno says why, when a verb set it).
inline ibv_context* open_device_named(const std::string& name) {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  ibv_context* context = nullptr;
  for (int i = 0; list && i < count && !context; ++i)
    if (name == ibv_get_device_name(list[i])) context = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  return context;
}

// Waits for `pid` until `deadline`, then kills it: its wait status, or
// nullopt when it had to be killed.
inline std::optional<int> wait_until(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return status;
}

}  // namespace softverbs::load
