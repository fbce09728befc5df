// Shared MR pages (shared_pages.h) for large registrations, moved when a
// peer of the host first reaches for them instead of inside ibv_reg_mr.
//
// Moving an MR's pages onto a shared file is a copy of them: 2 to 4 ms a
// MiB on the 2-core VMs (16 MiB: 31 ms, 1 GiB: 4 s), where registering
// pages as they are costs some 35 µs at any size. So an MR of
// kDeferredFrom bytes or more is registered with its pages as they are,
// and published so: an initiator of another process reaches it by
// system calls, as with
// SOFTVERBS_SHARE_MR_PAGES=0. The first such initiator sets the MR entry's
// pages_wanted and wakes this object's thread (target_table_layout.h),
// which moves the pages as a registration would (a writer waits for the
// move and loses nothing: page_move.h) and gives them to the MR; from
// then on peers copy with a memcpy. A process whose MRs no peer of the
// host reaches copies nothing.
//
// The owner says what happens around a move (Job): before it, the MR
// leaves the target table, so that no peer's system call writes into the
// old pages while they are copied (the pages would move from under it);
// meanwhile its operations travel as packets, which the owner's engine
// places, waiting for the move as any writer does. After it, the MR takes
// the pages, or goes on without when they could not move, and is published
// again.
//
// Threads: add() and cancel() from any thread; the jobs run one at a time
// on a thread of this object, started by the first add(). A job runs its
// two steps under the owner's locks; cancel() is called without them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "emulator/same_host/shared_pages.h"

namespace softverbs {

class TargetTable;

class DeferredSharing {
 public:
  // Smaller MRs share their pages at registration, which then costs up to
  // some 30 ms, and their peers copy with a memcpy from the first
  // operation: the buffers of the test suites, and perftest's for
  // messages up to 4 MiB, among them.
  static constexpr uint64_t kDeferredFrom = uint64_t{16} << 20;

  struct Job {
    // How initiators name the MR (TargetTable::pages_wanted).
    uint32_t device_index = 0;
    uint32_t rkey = 0;
    // The pages, as SharedPages::share() takes them.
    uint64_t addr = 0;
    uint64_t length = 0;
    std::function<void()> before_move;
    std::function<void(const std::optional<SharedPagesRef>&)> after_move;
  };
  struct Pending;
  using Handle = std::shared_ptr<Pending>;

  // `table` must outlive this object.
  explicit DeferredSharing(TargetTable& table);
  ~DeferredSharing();
  DeferredSharing(const DeferredSharing&) = delete;
  DeferredSharing& operator=(const DeferredSharing&) = delete;

  // The job waits until an initiator wants the MR's pages.
  Handle add(Job job);
  // Once this returns the job neither runs nor will: it never started, or
  // it ran to its end (waited for).
  void cancel(const Handle& handle);

  // Ends the thread (waiting for a move in progress); jobs still waiting
  // never run. The destructor does it too.
  void stop();

  // Jobs still waiting for a peer; jobs run (tests, stats).
  size_t waiting();
  uint64_t moves();

 private:
  void serve();
  Handle next_wanted_locked();
  void wake();

  TargetTable& table_;
  std::mutex mutex_;
  std::condition_variable ended_;  // a running job ended
  std::deque<Handle> waiting_;
  uint64_t moves_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace softverbs
