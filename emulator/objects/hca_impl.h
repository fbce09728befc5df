// What an open soft device holds in one process.
//
// Threads: the MR table is read on every memory access (shared lock) and
// changed by register/deregister (exclusive); the QP set and counters of
// destroyed QPs are for stats, under `objects_mutex`. The rest is set at
// open and read-only, except the port state (port_mutex).
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "emulator/engine/engine.h"
#include "emulator/objects/hca.h"
#include "emulator/sync/reader_sharded_mutex.h"
#include "emulator/transport/qp_counters.h"

namespace softverbs {

struct Hca::Impl {
  Hca* self = nullptr;
  Engine* engine = nullptr;
  DeviceDescription description;
  DeviceAttributes attributes;

  mutable std::mutex port_mutex;
  std::array<PortAttributes, kMaxPorts> ports;  // [0] is port 1

  std::atomic<AsyncEventSink*> async_sink{nullptr};
  std::atomic<uint32_t> next_pd_handle{1};

  mutable ReaderShardedMutex mr_mutex;  // read by every access, written by (de)registration
  uint32_t next_key_index = 1;
  std::unordered_map<uint32_t, Mr*> mrs_by_key;  // lkey == rkey (a null MR has no rkey)
  // Memory windows by the index part of their R_Keys (memory_window.h).
  std::unordered_map<uint32_t, Mw*> mws_by_index;
  std::atomic<uint64_t> device_memory_in_use{0};  // bytes, against max_dm_size

  mutable std::mutex objects_mutex;
  std::unordered_set<QpImpl*> qps;
  // SRQs by number, under their own leaf lock: a target QP's responder
  // looks up the XRC SRQ a packet names with the QP's lock held.
  mutable std::mutex srq_table_mutex;
  std::unordered_map<uint32_t, Srq*> srqs_by_number;
  uint32_t next_srqn = 1;
  // XRC domains opened on files, by file (xrc.cc).
  std::map<FileIdentity, std::weak_ptr<Xrcd>> xrcds_by_file;
  QpCounters destroyed_qp_counters;  // kept so device totals never go down

  // An MR's pages shared once a peer reaches for them (deferred_sharing.h),
  // and that deferral ended, waiting for a move in progress; neither with
  // mr_mutex held (mr.cc).
  void defer_sharing(Mr& mr);
  void stop_deferred_sharing(Mr& mr);
  // The MR of L_Key `lkey` was deregistered or changed: the receives
  // posted before that name it are checked again for placed SENDs
  // (qp_placed_sends.cc).
  void recheck_receives(uint32_t lkey);

  // Port `port` went down: its armed QPs migrate (path_migration.cc).
  void migrate_away_from(uint8_t port);

  // MR lookup for local (lkey) and remote (rkey) accesses, with mr_mutex
  // held. nullptr if none.
  // A new key: a 24-bit index and an 8-bit key byte that changes as
  // indices are reused, so a stale key misses. The index is one no live MR
  // or window holds: after 2^24 keys the counter wraps, and a long-lived
  // MR's must not be handed out again (the object quotas keep the live
  // ones far fewer than 2^24). With mr_mutex held.
  uint32_t next_key_locked() {
    for (;;) {
      const uint32_t index = next_key_index++ & 0xffffff;
      const uint32_t key = (index << 8) | ((index * 37u + 0x5a) & 0xff);
      if (index != 0 && !mrs_by_key.contains(key) && !mws_by_index.contains(index)) return key;
    }
  }
  Mr* find_mr_locked(uint32_t key) const {
    auto it = mrs_by_key.find(key);
    return it == mrs_by_key.end() ? nullptr : it->second;
  }
  Mw* find_mw_locked(uint32_t index) const {
    auto it = mws_by_index.find(index);
    return it == mws_by_index.end() ? nullptr : it->second;
  }
  // The SRQ with number `srqn`, with srq_table_mutex held; nullptr if none.
  Srq* find_srq_locked(uint32_t srqn) const {
    auto it = srqs_by_number.find(srqn);
    return it == srqs_by_number.end() ? nullptr : it->second;
  }
  void raise(const AsyncEvent& event) {
    if (AsyncEventSink* sink = async_sink.load(std::memory_order_acquire))
      sink->on_async_event(event);
  }
};

}  // namespace softverbs
