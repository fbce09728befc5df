#include "emulator/objects/object_quota.h"

namespace softverbs {

ObjectQuota::Slot& ObjectQuota::Slot::operator=(Slot&& other) noexcept {
  if (this != &other) {
    release();
    quota_ = other.quota_;
    kind_ = other.kind_;
    other.quota_ = nullptr;
  }
  return *this;
}

void ObjectQuota::Slot::release() {
  if (!quota_) return;
  quota_->held_[static_cast<int>(kind_)].fetch_sub(1, std::memory_order_relaxed);
  quota_ = nullptr;
}

ObjectQuota::Slot ObjectQuota::take(ObjectKind kind, uint32_t limit) {
  std::atomic<uint32_t>& held = held_[static_cast<int>(kind)];
  uint32_t now = held.load(std::memory_order_relaxed);
  do {
    if (now >= limit) return Slot{};
  } while (!held.compare_exchange_weak(now, now + 1, std::memory_order_relaxed));
  return Slot{this, kind};
}

}  // namespace softverbs
