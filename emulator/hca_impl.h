// What an open soft device holds in one process.
#pragma once

#include <unordered_map>
#include <unordered_set>

#include "emulator/engine.h"
#include "emulator/hca.h"
#include "emulator/qp_counters.h"

namespace softverbs {

struct Hca::Impl {
  Hca* self = nullptr;
  Engine* engine = nullptr;
  DeviceDescription description;
  DeviceAttributes attributes;
  PortAttributes port;
  AsyncEventSink* async_sink = nullptr;
  uint32_t next_pd_handle = 1;
  uint32_t next_key_index = 1;
  std::unordered_map<uint32_t, Mr*> mrs_by_key;  // lkey == rkey
  std::unordered_set<QpImpl*> qps;
  QpCounters destroyed_qp_counters;  // kept so device totals never go down

  // MR lookup for local (lkey) and remote (rkey) accesses. nullptr if none.
  Mr* find_mr(uint32_t key) const {
    auto it = mrs_by_key.find(key);
    return it == mrs_by_key.end() ? nullptr : it->second;
  }
  void raise(const AsyncEvent& event) {
    if (async_sink) async_sink->on_async_event(event);
  }
};

}  // namespace softverbs
