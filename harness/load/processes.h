// What the load runs do with devices and child processes: open a device by
// name, wait for a child until a deadline.
#pragma once

#include <dirent.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <fstream>
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

// Where each thread of `pid` waits, on stderr: its name, state and kernel
// wait channel (/proc/PID/task/TID/{comm,stat,wchan}), so that a process
// about to be killed for hanging says what it hung in.
inline void report_threads(pid_t pid) {
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(tasks.c_str());
  if (!dir) return;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string task = tasks + "/" + entry->d_name;
    const auto first_line = [](const std::string& path) {
      std::ifstream in(path);
      std::string line;
      std::getline(in, line);
      return line;
    };
    const std::string stat = first_line(task + "/stat");
    const size_t name_end = stat.rfind(')');
    const char state = name_end != std::string::npos && name_end + 2 < stat.size()
                           ? stat[name_end + 2]
                           : '?';
    std::fprintf(stderr, "  pid %d thread %s (%s): state %c, waiting in %s\n", int(pid),
                 entry->d_name, first_line(task + "/comm").c_str(), state,
                 first_line(task + "/wchan").c_str());
  }
  closedir(dir);
}

// Waits for `pid` until `deadline`, then says where its threads are and
// kills it: its wait status, or nullopt when it had to be killed.
inline std::optional<int> wait_until(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      report_threads(pid);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return status;
}

}  // namespace softverbs::load
