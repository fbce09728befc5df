// The libc calls librdmacm makes on /dev/infiniband/rdma_cm, interposed so
// the device file is served in the process (docs/rdmacm.md says why this
// face and not librdmacm's own functions). Every other path and fd goes to
// libc unchanged. The version script puts these names under libc's own
// version nodes (GLIBC_2.2.5 ...), so that references bound to those
// versions, as librdmacm's are, find them first.
#include <dlfcn.h>
#include <fcntl.h>
#include <rdma/rdma_user_cm.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>

#include "provider/exports.h"
#include "provider/rdmacm/cm_file.h"
#include "provider/rdmacm/cm_file_table.h"

namespace softverbs::provider {
namespace {

template <typename Function>
Function* libc_function(const char* name) {
  return reinterpret_cast<Function*>(::dlsym(RTLD_NEXT, name));
}

// `real`: libc's `name`, of type `type` (glibc's headers no longer declare
// some of the entry points it still exports, such as __fxstat).
#define SOFTVERBS_LIBC_AS(name, type)                                        \
  static auto* const real = libc_function<type>(#name);                      \
  if (!real) {                                                               \
    errno = ENOSYS;                                                          \
    return -1;                                                               \
  }
#define SOFTVERBS_LIBC(name) SOFTVERBS_LIBC_AS(name, decltype(::name))

// Whether the rdma_cm device file is to be served here: SOFTVERBS_RDMA_CM=0
// leaves it to the kernel (where one has it) for the whole process.
bool serves_rdma_cm() {
  static const bool serves = [] {
    const char* value = ::getenv("SOFTVERBS_RDMA_CM");
    return !(value && std::strcmp(value, "0") == 0);
  }();
  return serves;
}

bool is_rdma_cm_path(const char* path) {
  return path && std::strcmp(path, kRdmaCmPath) == 0 && serves_rdma_cm();
}

mode_t mode_argument(int flags, va_list args) {
  return (flags & (O_CREAT | O_TMPFILE)) ? static_cast<mode_t>(va_arg(args, int)) : 0;
}

// What fstat(2) says of the device file: a character device, as librdmacm
// checks; the kernel's own numbers when it has one, so its check of them
// holds too.
void describe_cm_file(struct stat* out) {
  std::memset(out, 0, sizeof *out);
  struct stat real_device;
  if (::stat(kRdmaCmPath, &real_device) == 0 && S_ISCHR(real_device.st_mode)) {
    *out = real_device;
    return;
  }
  out->st_mode = S_IFCHR | 0666;
  out->st_rdev = makedev(10, 58);  // a misc device, as the kernel's is
  out->st_nlink = 1;
  out->st_blksize = 4096;
}

// What fstat(2) says of `fd` when it is an rdma_cm file (stat and stat64
// are one layout on 64-bit Linux); false for any other fd.
template <typename Stat>
bool stat_of_cm_file(int fd, Stat* out) {
  static_assert(sizeof(Stat) == sizeof(struct stat));
  if (!find_cm_file(fd)) return false;
  struct stat described;
  describe_cm_file(&described);
  std::memcpy(out, &described, sizeof described);
  return true;
}

// A thread that asks for an event while another closes the channel: on the
// kernel's file it blocks if its call came first, and gets EBADF if it came
// after. Programs (rping's event thread among them) count on the first,
// which is what a thread usually wins; here the close is seen first more
// often (the thread has more to do to get in), so a GET_EVENT on an
// rdma_cm fd that was closed blocks, as if it had come first: whether the
// fd is closed now, or already names a file opened since (then the
// command, exactly as librdmacm writes it, is surely not meant for that
// file).
[[noreturn]] void block_as_on_a_closed_channel() {
  while (true) pause();
}

bool asks_for_event_on_closed_channel(int fd, const void* buffer, size_t count) {
  rdma_ucm_cmd_hdr header;
  if (count != sizeof header + sizeof(rdma_ucm_get_event) || !was_closed_cm_file(fd))
    return false;
  std::memcpy(&header, buffer, sizeof header);
  return header.cmd == RDMA_USER_CM_CMD_GET_EVENT && header.in == sizeof(rdma_ucm_get_event) &&
         header.out >= offsetof(rdma_ucm_event_resp, reserved);
}

}  // namespace
}  // namespace softverbs::provider

using namespace softverbs::provider;

SOFTVERBS_EXPORT int open(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = mode_argument(flags, args);
  va_end(args);
  if (is_rdma_cm_path(path)) return open_cm_file(flags);
  SOFTVERBS_LIBC(open);
  return real(path, flags, mode);
}

SOFTVERBS_EXPORT int open64(const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = mode_argument(flags, args);
  va_end(args);
  if (is_rdma_cm_path(path)) return open_cm_file(flags);
  SOFTVERBS_LIBC(open64);
  return real(path, flags, mode);
}

SOFTVERBS_EXPORT int openat(int dir, const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = mode_argument(flags, args);
  va_end(args);
  if (is_rdma_cm_path(path)) return open_cm_file(flags);
  SOFTVERBS_LIBC(openat);
  return real(dir, path, flags, mode);
}

SOFTVERBS_EXPORT int openat64(int dir, const char* path, int flags, ...) {
  va_list args;
  va_start(args, flags);
  const mode_t mode = mode_argument(flags, args);
  va_end(args);
  if (is_rdma_cm_path(path)) return open_cm_file(flags);
  SOFTVERBS_LIBC(openat64);
  return real(dir, path, flags, mode);
}

SOFTVERBS_EXPORT int fstat(int fd, struct stat* out) {
  if (stat_of_cm_file(fd, out)) return 0;
  SOFTVERBS_LIBC(fstat);
  return real(fd, out);
}

SOFTVERBS_EXPORT int fstat64(int fd, struct stat64* out) {
  if (stat_of_cm_file(fd, out)) return 0;
  SOFTVERBS_LIBC(fstat64);
  return real(fd, out);
}

// glibc's old stat entry points, still exported: ThreadSanitizer's fstat
// interceptor calls __fxstat, so under it the calls above are never reached.
SOFTVERBS_EXPORT int __fxstat(int version, int fd, struct stat* out) {
  if (stat_of_cm_file(fd, out)) return 0;
  SOFTVERBS_LIBC_AS(__fxstat, int(int, int, struct stat*));
  return real(version, fd, out);
}

SOFTVERBS_EXPORT int __fxstat64(int version, int fd, struct stat64* out) {
  if (stat_of_cm_file(fd, out)) return 0;
  SOFTVERBS_LIBC_AS(__fxstat64, int(int, int, struct stat64*));
  return real(version, fd, out);
}

SOFTVERBS_EXPORT ssize_t write(int fd, const void* buffer, size_t count) {
  if (auto file = find_cm_file(fd)) return file->write_command(buffer, count);
  if (asks_for_event_on_closed_channel(fd, buffer, count)) block_as_on_a_closed_channel();
  SOFTVERBS_LIBC(write);
  return real(fd, buffer, count);
}

SOFTVERBS_EXPORT int close(int fd) {
  forget_cm_file(fd);
  SOFTVERBS_LIBC(close);
  return real(fd);
}
