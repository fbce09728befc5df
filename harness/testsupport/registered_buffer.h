// A page-aligned buffer registered as one memory region.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "harness/testsupport/errors.h"
#include "harness/testsupport/verbs_handles.h"

namespace softverbs::testsupport {

class RegisteredBuffer {
 public:
  RegisteredBuffer() = default;
  RegisteredBuffer(RegisteredBuffer&& other) noexcept;
  RegisteredBuffer& operator=(RegisteredBuffer&& other) noexcept;
  RegisteredBuffer(const RegisteredBuffer&) = delete;
  RegisteredBuffer& operator=(const RegisteredBuffer&) = delete;
  ~RegisteredBuffer();

  // Maps `length` bytes (at least one page) and registers them on `pd` with
  // `access`, at virtual address `iova` through the keys (0: the buffer's
  // own address). Returns the errno of mmap or ibv_reg_mr(_iova).
  Errno allocate(ibv_pd* pd, size_t length, int access, uint64_t iova = 0);
  // Unmaps the memory and keeps the MR: what a program that unmaps
  // registered memory leaves an HCA with. The range stays reserved and
  // inaccessible until the buffer goes, so no later mapping takes its place.
  // data() is then null.
  void unmap_memory();

  uint8_t* data() const { return data_; }
  size_t size() const { return length_; }
  std::span<uint8_t> bytes() const { return {data_, length_}; }
  ibv_mr* mr() const { return mr_.get(); }
  uint32_t lkey() const { return mr_->lkey; }
  uint32_t rkey() const { return mr_->rkey; }
  uint64_t address() const { return reinterpret_cast<uintptr_t>(data_); }
  // The address of the first byte through the keys.
  uint64_t mr_address() const { return iova_ ? iova_ : address(); }

 private:
  void release();

  MrPtr mr_;  // deregistered before the memory goes
  uint8_t* data_ = nullptr;
  uint8_t* reserved_ = nullptr;  // the range unmap_memory() left inaccessible
  size_t length_ = 0;
  size_t mapped_ = 0;
  uint64_t iova_ = 0;
};

}  // namespace softverbs::testsupport
