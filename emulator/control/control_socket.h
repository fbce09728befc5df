// Where a process using softverbs listens for control requests (`softverbs
// stats`, `softverbs fault`, `softverbs port`): an abstract unix socket named
// after the user and the pid, so nothing is left in the file system when the
// process dies. Only the same user may connect (checked with SO_PEERCRED).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace softverbs::control {

// "<shm prefix>-<euid>-ctl-<pid>", the abstract name without its leading NUL.
std::string socket_name(pid_t pid);

// Pids of this user's processes that serve a control socket (from
// /proc/net/unix), in ascending order.
std::vector<pid_t> list_processes();

// Sends one request line and returns the whole reply. false + error text when
// the process can't be reached.
bool request(pid_t pid, const std::string& line, std::string& reply, std::string& error);

}  // namespace softverbs::control
