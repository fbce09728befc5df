#include "emulator/same_host/deferred_sharing.h"

#include <algorithm>

#include "emulator/same_host/target_table.h"
#include "emulator/sync/internal_thread.h"
#include "emulator/wire/futex.h"

namespace softverbs {
namespace {

// While jobs wait, the thread also looks once in this long without a wake
// (an initiator whose wake a scribbled word swallowed is still served).
constexpr uint64_t kLookAgainNs = 1'000'000'000;

}  // namespace

struct DeferredSharing::Pending {
  enum class State : uint8_t { kWaiting, kRunning, kEnded };
  Job job;
  State state = State::kWaiting;
};

DeferredSharing::DeferredSharing(TargetTable& table) : table_(table) {}

DeferredSharing::~DeferredSharing() { stop(); }

void DeferredSharing::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    if (!thread_.joinable()) return;
  }
  wake();
  thread_.join();
}

DeferredSharing::Handle DeferredSharing::add(Job job) {
  auto pending = std::make_shared<Pending>();
  pending->job = std::move(job);
  bool asked_already;
  {
    std::lock_guard lock(mutex_);
    waiting_.push_back(pending);
    if (!thread_.joinable() && !stopping_) thread_ = start_internal_thread([this] { serve(); });
    asked_already = table_.pages_wanted(pending->job.device_index, pending->job.rkey);
  }
  // Asked between the MR's publication and now: the thread may have looked
  // before the job was there. Any later ask wakes it itself.
  if (asked_already) wake();
  return pending;
}

void DeferredSharing::cancel(const Handle& handle) {
  if (!handle) return;
  std::unique_lock lock(mutex_);
  if (handle->state == Pending::State::kWaiting) {
    std::erase(waiting_, handle);
    handle->state = Pending::State::kEnded;
    return;
  }
  ended_.wait(lock, [&] { return handle->state == Pending::State::kEnded; });
}

size_t DeferredSharing::waiting() {
  std::lock_guard lock(mutex_);
  return waiting_.size();
}

uint64_t DeferredSharing::moves() {
  std::lock_guard lock(mutex_);
  return moves_;
}

void DeferredSharing::wake() {
  std::atomic<uint32_t>& calls = table_.pages_wanted_calls();
  calls.fetch_add(1, std::memory_order_release);
  futex_wake_shared(calls, 1);
}

DeferredSharing::Handle DeferredSharing::next_wanted_locked() {
  auto wanted = std::find_if(waiting_.begin(), waiting_.end(), [&](const Handle& p) {
    return table_.pages_wanted(p->job.device_index, p->job.rkey);
  });
  if (wanted == waiting_.end()) return nullptr;
  Handle pending = *wanted;
  waiting_.erase(wanted);
  pending->state = Pending::State::kRunning;
  return pending;
}

void DeferredSharing::serve() {
  std::atomic<uint32_t>& calls = table_.pages_wanted_calls();
  for (;;) {
    // Read before looking: an ask after the look changes it, and the wait
    // below returns at once.
    const uint32_t seen = calls.load(std::memory_order_acquire);
    Handle pending;
    bool any_waiting;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      pending = next_wanted_locked();
      any_waiting = !waiting_.empty();
    }
    if (!pending) {
      futex_wait_shared(calls, seen, any_waiting ? kLookAgainNs : 0);
      continue;
    }
    const Job& job = pending->job;
    job.before_move();
    job.after_move(SharedPages::process().share(job.addr, job.length));
    {
      std::lock_guard lock(mutex_);
      pending->state = Pending::State::kEnded;
      ++moves_;
    }
    ended_.notify_all();
  }
}

}  // namespace softverbs
