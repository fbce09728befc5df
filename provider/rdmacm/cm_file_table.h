// Which file descriptors are open rdma_cm device files. The kernel's
// /dev/infiniband/rdma_cm is emulated in the process: librdmacm opens it,
// writes its commands to it and polls it for events, through the libc
// calls interposed in cm_file_calls.cc, which ask this table first.
#pragma once

#include <memory>

namespace softverbs::provider {

class CmFile;

// The path librdmacm opens.
inline constexpr const char* kRdmaCmPath = "/dev/infiniband/rdma_cm";

// Opens a new rdma_cm file with open(2)'s flags (O_CLOEXEC, O_NONBLOCK).
// Returns its fd, or -1 with errno set.
int open_cm_file(int flags);

// The file behind `fd`, or null if `fd` is not an rdma_cm file. Lock-free
// for any other fd: every write(2) of the process asks.
std::shared_ptr<CmFile> find_cm_file(int fd);

// Forgets `fd` before it is closed; the file ends when its last user lets go.
void forget_cm_file(int fd);

// Whether `fd` was an rdma_cm file that has been closed (and not reused by
// another rdma_cm file since).
bool was_closed_cm_file(int fd);

}  // namespace softverbs::provider
