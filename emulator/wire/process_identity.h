// Telling a live process from a dead one whose pid may have been reused.
// A pid alone is not an identity: the kernel hands it out again. The pair
// (pid, start time since boot) is.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "emulator/types.h"

namespace softverbs {

// Start time of `pid` in clock ticks since boot (/proc/<pid>/stat field 22).
// ENOENT when there is no such process, ESRCH when it has exited but was not
// reaped yet (a zombie holds no resources and will never run again; one
// whose first thread called pthread_exit() while others run is no zombie).
Errno read_process_start_time(pid_t pid, uint64_t& start_time);

// This process's pid, kept: getpid() is a system call in glibc, and a run
// frame names its sender on every send. Learnt anew in a forked child.
pid_t own_pid();

// This process's start time (0 if /proc is unreadable).
uint64_t own_start_time();

// True while the process that had `pid` and `start_time` is running. Only
// for a process of this PID namespace.
bool is_process_alive(pid_t pid, uint64_t start_time);

}  // namespace softverbs
