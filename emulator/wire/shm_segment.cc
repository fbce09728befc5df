#include "emulator/wire/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "emulator/wire/shm_names.h"

namespace softverbs {

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      address_(std::exchange(other.address_, nullptr)),
      mapped_size_(std::exchange(other.mapped_size_, 0)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    address_ = std::exchange(other.address_, nullptr);
    mapped_size_ = std::exchange(other.mapped_size_, 0);
  }
  return *this;
}

ShmSegment::~ShmSegment() { release(); }

void ShmSegment::release() {
  if (address_ != nullptr) munmap(address_, mapped_size_);
  address_ = nullptr;
  mapped_size_ = 0;
  close_descriptor();
}

void ShmSegment::forget_file() {
  if (address_ != nullptr &&
      mmap(address_, mapped_size_, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS,
           -1, 0) == MAP_FAILED) {
    munmap(address_, mapped_size_);  // no memory for a private copy: the range goes too
    address_ = nullptr;
    mapped_size_ = 0;
  }
  close_descriptor();
}

void ShmSegment::close_descriptor() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Errno ShmSegment::create_exclusive(const std::string& name, size_t size, ShmSegment& out) {
  out = ShmSegment();
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, S_IRUSR | S_IWUSR);
  if (fd < 0) return errno;
  out.fd_ = fd;
  // The umask may have taken bits away; the mode must be exactly 0600.
  Errno err = fchmod(fd, S_IRUSR | S_IWUSR) == 0 ? 0 : errno;
  if (err == 0) err = reserve_zeros(fd, size);
  if (err != 0) {
    shm_unlink(name.c_str());
    out = ShmSegment();
  }
  return err;
}

// Allocates the memory behind the first `size` bytes now rather than when a
// page is first touched: ftruncate alone leaves a sparse file, and a full
// tmpfs then kills whoever touches a new page with SIGBUS. On tmpfs the
// file's size is set only once every page is there.
Errno ShmSegment::reserve_zeros(int fd, size_t size) {
  constexpr int kInterruptionsTolerated = 100;
  Errno err = EINTR;
  for (int attempt = 0; attempt < kInterruptionsTolerated && err == EINTR; ++attempt) {
    err = posix_fallocate(fd, 0, static_cast<off_t>(size));  // returns the error, errno untouched
  }
  return err;
}

Errno ShmSegment::open_existing(const std::string& name, ShmSegment& out) {
  out = ShmSegment();
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return errno;
  out.fd_ = fd;
  struct stat st;
  if (Errno err = out.stat(st); err != 0) {
    out = ShmSegment();
    return err;
  }
  return 0;
}

Errno ShmSegment::stat(struct stat& out) const {
  if (fd_ < 0) return EBADF;
  if (fstat(fd_, &out) != 0) return errno;
  return check_private_to_user(out);
}

Errno ShmSegment::map(size_t size, bool populate) {
  if (fd_ < 0 || address_ != nullptr) return EINVAL;
  struct stat st;
  if (Errno err = stat(st); err != 0) return err;
  if (static_cast<size_t>(st.st_size) < size) return EINVAL;
  void* address = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                       MAP_SHARED | (populate ? MAP_POPULATE : 0), fd_, 0);
  if (address == MAP_FAILED) return errno;
  if (populate) {
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    for (size_t at = 0; at + sizeof(uint64_t) <= size; at += page)
      __atomic_fetch_add(reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(address) + at), 0,
                         __ATOMIC_RELAXED);
  }
  address_ = address;
  mapped_size_ = size;
  return 0;
}

Errno check_private_to_user(const struct stat& st) {
  if (st.st_uid != geteuid()) return EACCES;
  if ((st.st_mode & 07777) != (S_IRUSR | S_IWUSR)) return EACCES;
  return 0;
}

bool segment_name_refers_to(const std::string& name, const struct stat& st) {
  struct stat current;
  if (::stat(shm_file_path(name).c_str(), &current) != 0) return false;
  return current.st_dev == st.st_dev && current.st_ino == st.st_ino;
}

Errno unlink_segment(const std::string& name) {
  if (shm_unlink(name.c_str()) == 0 || errno == ENOENT) return 0;
  return errno;
}

}  // namespace softverbs
