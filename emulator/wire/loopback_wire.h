// The in-process wire: frames go into a FIFO and come out of the same
// process's poll(). Unit tests use it with a filter to drop, or look at,
// exactly the packets they choose.
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "emulator/wire/doorbell.h"
#include "emulator/wire/same_host_peers.h"
#include "emulator/wire/shm_mailbox_layout.h"
#include "emulator/wire/wire.h"

namespace softverbs {

class LoopbackWire final : public Wire, public SameHostPeers, public Doorbell {
 public:
  // Returns false to drop the frame. Called for every frame sent.
  using Filter = std::function<bool(std::span<const uint8_t> frame)>;
  void set_filter(Filter filter) { filter_ = std::move(filter); }

  bool send(const WireAddress& dst, std::span<const uint8_t> frame) override;
  size_t poll(const std::function<void(std::span<const uint8_t>)>& deliver,
              size_t budget) override;
  // Its doorbell never sleeps: tests drive the engine's progress.
  void wait(uint64_t timeout_ns) override {}
  void wake() override {}
  bool has_deferred() const override { return false; }
  bool may_have_input() const override { return queued() != 0; }
  WireCounters counters() const override {
    std::lock_guard lock(mutex_);
    return counters_;
  }
  size_t queued() const {
    std::lock_guard lock(mutex_);
    return frames_.size();
  }
  // Frames stay in this process, so runs can be pulled from it; a test that
  // wants them says allow_runs() (the engine then decides as on any wire)
  // and gives the wire to the engine as its same-host peers.
  void allow_runs(bool allow) { runs_allowed_ = allow; }
  bool accepts_runs(const WireAddress&) override { return runs_allowed_ && accepting_runs_; }
  void set_accepting_runs(bool accepting) override { accepting_runs_ = accepting; }
  // Every QP is in this process, so one target area serves them all; a
  // test that wants direct execution says allow_direct(). The targets pass
  // for another process's (copies by system call, the rules of a peer)
  // unless the test says direct_as_same_process().
  void allow_direct(bool allow) { direct_allowed_ = allow; }
  void direct_as_same_process(bool same) { direct_same_process_ = same; }
  // How often a peer's target area was asked for, and the QPN last asked.
  uint64_t target_areas_asked() const { return target_areas_asked_.load(); }
  uint32_t last_target_area_asked() const { return last_target_area_asked_.load(); }
  std::span<uint8_t> own_target_area() override { return target_area_->bytes; }
  PeerTargetArea peer_target_area(const WireAddress& dst, Attention) override {
    target_areas_asked_.fetch_add(1, std::memory_order_relaxed);
    last_target_area_asked_.store(dst.qpn, std::memory_order_relaxed);
    if (!direct_allowed_) return {};
    return PeerTargetArea{target_area_, target_area_->bytes, false, direct_same_process_};
  }
  // Into the one queue, like any frame (the filter sees it too).
  bool push_now(const WireAddress& dst, const PeerTargetArea&,
                std::span<const uint8_t> frame) override {
    return send(dst, frame);
  }
  // Every QP is served by this process's one queue: its backlog is what
  // was queued and not yet taken.
  std::optional<IntakeBacklog> intake_backlog(const WireAddress&) override {
    std::lock_guard lock(mutex_);
    return IntakeBacklog{frames_queued_, counters_.frames_received, UINT64_MAX};
  }
  void intake_pass_ended() override {}
  bool own_ring_drained() override { return queued() == 0; }
  uint64_t ring_damage() const override { return 0; }

 private:
  Filter filter_;
  // Sends and polls may come from several threads (a progress thread, the
  // connection manager's agents).
  mutable std::mutex mutex_;
  std::deque<std::vector<uint8_t>> frames_;
  WireCounters counters_;
  uint64_t frames_queued_ = 0;  // ever
  bool runs_allowed_ = false;
  bool accepting_runs_ = false;
  bool direct_same_process_ = false;
  struct TargetArea {
    alignas(64) std::array<uint8_t, kMailboxTargetAreaBytes> bytes{};
  };
  std::shared_ptr<TargetArea> target_area_ = std::make_shared<TargetArea>();
  bool direct_allowed_ = false;
  std::atomic<uint64_t> target_areas_asked_{0};
  std::atomic<uint32_t> last_target_area_asked_{0};
};

}  // namespace softverbs
