#include "harness/testsupport/registered_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace softverbs::testsupport {

RegisteredBuffer::RegisteredBuffer(RegisteredBuffer&& other) noexcept
    : mr_(std::move(other.mr_)),
      data_(std::exchange(other.data_, nullptr)),
      reserved_(std::exchange(other.reserved_, nullptr)),
      length_(std::exchange(other.length_, 0)),
      mapped_(std::exchange(other.mapped_, 0)),
      iova_(std::exchange(other.iova_, 0)) {}

RegisteredBuffer& RegisteredBuffer::operator=(RegisteredBuffer&& other) noexcept {
  if (this != &other) {
    release();
    mr_ = std::move(other.mr_);
    data_ = std::exchange(other.data_, nullptr);
    reserved_ = std::exchange(other.reserved_, nullptr);
    length_ = std::exchange(other.length_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
    iova_ = std::exchange(other.iova_, 0);
  }
  return *this;
}

RegisteredBuffer::~RegisteredBuffer() { release(); }

void RegisteredBuffer::release() {
  mr_.reset();
  if (data_) munmap(data_, mapped_);
  if (reserved_) munmap(reserved_, mapped_);
  data_ = reserved_ = nullptr;
  length_ = mapped_ = 0;
}

void RegisteredBuffer::unmap_memory() {
  // Unmapped, and the range held inaccessible (PROT_NONE) so that no later
  // mapping of this process (a thread's heap, a socket buffer) lands there
  // and takes the access in its place.
  if (data_)
    mmap(data_, mapped_, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
         0);
  reserved_ = std::exchange(data_, nullptr);
}

Errno RegisteredBuffer::allocate(ibv_pd* pd, size_t length, int access, uint64_t iova) {
  release();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = length == 0 ? page : (length + page - 1) / page * page;
  void* memory = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return errno;
  data_ = static_cast<uint8_t*>(memory);
  mapped_ = mapped;
  length_ = length == 0 ? mapped : length;
  errno = 0;
  iova_ = iova;
  mr_.reset(iova ? ibv_reg_mr_iova(pd, data_, length_, iova, access)
                 : ibv_reg_mr(pd, data_, length_, access));
  if (!mr_) {
    Errno err = errno ? errno : EINVAL;
    release();
    return err;
  }
  return 0;
}

}  // namespace softverbs::testsupport
