// The engine of one process: the wire, the clock, the lock over all transport
// state, the table of local QPs, timers, and the progress thread.
//
// Threads and ownership (the rule every file follows):
//  - All transport state (QPs, CQs, MRs, timers) is guarded by mutex().
//    Application threads take it inside each verb; the progress thread takes
//    it to serve packets that arrive while the application is not calling in.
//  - A busy-polling application drives progress itself (Cq::poll runs
//    progress_locked()), so no thread hop sits in its fast path; the progress
//    thread sleeps on the wire's doorbell whenever it finds nothing to do,
//    and senders ring it only while it sleeps. It serves what arrives while
//    the application is not calling in: one-sided operations whose target
//    polls memory, ACKs, timers. It runs at a raised priority where the
//    process may (so a target spinning on memory does not hold it off the
//    CPU for a scheduler tick), and when it finds an application thread
//    inside a verb it naps instead of contending for the lock: that thread
//    serves what came. (Measured on two cores: ib_write_lat 64 B typical
//    29 us, 99% 86 us; ibv_rc_pingpong 64 B 3-4 us per round trip.)
//  - The wire has its own internal locking; the engine calls it under mutex().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "emulator/clock.h"
#include "emulator/packet/codec.h"
#include "emulator/types.h"
#include "emulator/wire/wire.h"

namespace softverbs {

struct QpImpl;
class Hca;
namespace fault {
class FaultInjector;
}
namespace control {
class ControlServer;
}

// Hands out QPNs unique across every process using a device.
class QpnSource {
 public:
  virtual ~QpnSource() = default;
  virtual Errno allocate(uint32_t device_index, uint32_t& qpn) = 0;
  virtual void release(uint32_t device_index, uint32_t qpn) = 0;
};

struct EngineCounters {
  uint64_t frames_sent = 0;
  uint64_t frames_received = 0;
  uint64_t frames_dropped_malformed = 0;  // decode failed (ICRC, lengths, ...)
  uint64_t frames_dropped_no_qp = 0;      // no such local QP
  uint64_t frames_dropped_unroutable = 0; // the wire had no route
  uint64_t frames_dropped_bad_icrc = 0;   // of the malformed: ICRC mismatch
  uint64_t frames_dropped_port_down = 0;  // in or out while the port was down
};

class Engine {
 public:
  struct Config {
    std::unique_ptr<Wire> wire;
    std::unique_ptr<QpnSource> qpns;
    const Clock* clock = nullptr;
    bool progress_thread = true;
    // Kept alive as long as the engine (e.g. the shm registry behind qpns).
    std::shared_ptr<void> keepalive;
    // Set when `wire` is (or wraps) a fault injector.
    fault::FaultInjector* fault_injector = nullptr;
  };

  explicit Engine(Config config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The engine of this process on the shared-memory wire, created on first
  // use. nullptr + err when the shared registry or mailbox can't be set up.
  static Engine* process(Errno& err);

  std::mutex& mutex() { return mutex_; }
  const Clock& clock() const { return *clock_; }
  Wire& wire() { return *wire_; }

  // QP table. Called with mutex() held.
  Errno add_qp(uint32_t device_index, QpImpl* qp, uint32_t& qpn);
  void remove_qp(uint32_t device_index, uint32_t qpn);

  // Encodes and sends one frame. Called with mutex() held.
  void transmit(uint32_t device_index, uint32_t qpn, const packet::Headers& headers,
                std::span<const uint8_t> payload);

  // A QP whose timer is armed is checked by progress_locked().
  // Wakes the progress thread if it sleeps past the QP's deadline, so a
  // timer armed while the application is not polling fires on time.
  void watch_timer(QpImpl* qp);
  void unwatch_timer(QpImpl* qp) { timed_qps_.erase(qp); }

  // Serves up to `budget` arrived frames and expired timers. Called with
  // mutex() held. Returns the number of frames served.
  size_t progress_locked(size_t budget = 64);

  EngineCounters counters() const { return counters_; }

  // The HCAs open in this process (for stats and port events). With mutex().
  void add_hca(Hca* hca) { hcas_.insert(hca); }
  void remove_hca(Hca* hca) { hcas_.erase(hca); }
  const std::unordered_set<Hca*>& hcas() const { return hcas_; }

  // Port state of a device as this process sees it: a downed port drops
  // every frame in and out and raises PORT_ERR; up again, PORT_ACTIVE.
  bool port_up(uint32_t device_index) const { return !(ports_down_ & (1u << device_index)); }
  void set_port_up(uint32_t device_index, bool up);  // with mutex()

  // Forced RNR: the responder answers every SEND with an RNR NAK, as if no
  // receive WQE were posted. 0: off; kAllQps: every QP; else one QPN.
  static constexpr uint32_t kAllQps = 0xffffffff;
  uint32_t forced_rnr_qpn = 0;  // with mutex()

  // The fault injector between the engine and the wire, if there is one.
  fault::FaultInjector* fault_injector() const { return fault_injector_; }

  // Starts answering `softverbs stats/fault/port` on this process's control
  // socket (the process engine does; unit-test engines don't).
  void start_control_server();


 private:
  void deliver(std::span<const uint8_t> frame);
  void run_timers();
  uint64_t next_deadline_ns() const;
  void progress_thread_main();

  std::mutex mutex_;
  std::unique_ptr<Wire> wire_;
  std::unique_ptr<QpnSource> qpns_;
  const Clock* clock_;
  std::shared_ptr<void> keepalive_;
  std::unordered_map<uint64_t, QpImpl*> qps_;
  std::unordered_set<Hca*> hcas_;
  uint32_t ports_down_ = 0;  // bit per device index
  fault::FaultInjector* fault_injector_ = nullptr;
  std::unique_ptr<control::ControlServer> control_server_;
  std::unordered_set<QpImpl*> timed_qps_;
  EngineCounters counters_;
  std::array<uint8_t, packet::kMaxFrameBytes> frame_buffer_{};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> progress_sleeps_until_ns_{0};  // 0: not asleep
  std::thread progress_thread_;
};

}  // namespace softverbs
