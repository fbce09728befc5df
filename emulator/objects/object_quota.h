// How many objects of each kind one soft device holds in this process,
// against the device's limits (max_pd, max_cq, max_qp, max_mr, max_srq,
// max_ah, max_mw): one past the limit is refused with ENOMEM, as an HCA refuses
// when its resource tables are full. The count is per process, every
// context of the device in it together (a real HCA counts every process;
// QPNs, the one resource soft devices share between processes, are also
// bounded host-wide by the registry).
//
// Threads: lock-free; any thread takes and gives back.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace softverbs {

enum class ObjectKind : uint8_t { kPd, kCq, kQp, kMr, kSrq, kAh, kMw };
inline constexpr int kObjectKinds = 7;

class ObjectQuota {
 public:
  // One object's place in the count, given back when the object goes.
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& other) noexcept : quota_(other.quota_), kind_(other.kind_) {
      other.quota_ = nullptr;
    }
    Slot& operator=(Slot&& other) noexcept;
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot() { release(); }
    explicit operator bool() const { return quota_ != nullptr; }

   private:
    friend class ObjectQuota;
    Slot(ObjectQuota* quota, ObjectKind kind) : quota_(quota), kind_(kind) {}
    void release();
    ObjectQuota* quota_ = nullptr;
    ObjectKind kind_ = ObjectKind::kPd;
  };

  // A slot if fewer than `limit` objects of `kind` are held; else an empty
  // one (the caller fails with ENOMEM).
  Slot take(ObjectKind kind, uint32_t limit);
  uint32_t held(ObjectKind kind) const {
    return held_[static_cast<int>(kind)].load(std::memory_order_relaxed);
  }

 private:
  std::array<std::atomic<uint32_t>, kObjectKinds> held_{};
};

}  // namespace softverbs
