// The owner's side of the target table (target_table_layout.h): this
// process publishes its RC QPs and its MRs' R_Keys there, so that an
// initiator on the same host executes RDMA WRITEs and READs on it without
// its CPU (direct_execution.h). Entries are claimed and freed here under
// an in-process mutex; each entry's fields change under its shared lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>

#include "emulator/same_host/shared_pages.h"
#include "emulator/same_host/target_table_layout.h"

namespace softverbs {

class LivenessPage;

// What an MR entry says: where the R_Key's address space lies.
struct TargetMemory {
  uint32_t device_index = 0;
  uint32_t rkey = 0;
  uint32_t access = 0;
  uint64_t pd = 0;
  uint64_t iova = 0;
  uint64_t length = 0;
  uint64_t host_address = 0;
  std::optional<SharedPagesRef> pages;  // the pages' file, when they are shared
};

class TargetTable {
 public:
  // Lays the table out in `area` (at least sizeof(TargetTableLayout)
  // bytes; empty: a table that publishes nothing).
  explicit TargetTable(std::span<uint8_t> area);
  ~TargetTable();
  TargetTable(const TargetTable&) = delete;
  TargetTable& operator=(const TargetTable&) = delete;

  // What keys the entries' seals (target_table_layout.h).
  uint64_t seed() const { return seed_; }

  // Whether initiators may execute here at all (not while a fault rule or a
  // capture must see every packet).
  void set_accepting(bool accepting);
  // Whether initiators may place SENDs here (not while RNR is forced).
  void set_taking_sends(bool taking);

  // The calling thread holds the liveness page's mutex (liveness_page.h;
  // made when MR pages are shared) until it lets go, from the same thread;
  // it must live that long.
  void hold_liveness();
  void release_liveness();

  // An entry for an RC QP, closed; nullptr when there is no room (its
  // operations then all travel as packets).
  TargetQpEntry* add_qp(uint32_t device_index, uint32_t qpn);
  // Frees it once no initiator uses it.
  void remove_qp(TargetQpEntry* entry);
  // The receive counts beside an entry add_qp() gave.
  TargetQpReceives& receives_of(TargetQpEntry* entry);

  // An MR's R_Key, published or withdrawn (waits for an operation using
  // it). Without room the R_Key is simply not published.
  void publish_mr(const TargetMemory& mr);
  void withdraw_mr(uint32_t device_index, uint32_t rkey);

  // Whether an initiator of another process asked for the pages of the MR
  // published under `rkey` to be shared (target_table_layout.h), and the
  // word such an ask bumps and wakes (a futex; the table's own when it
  // publishes nothing, where nobody asks).
  bool pages_wanted(uint32_t device_index, uint32_t rkey);
  std::atomic<uint32_t>& pages_wanted_calls();

 private:
  TargetTableLayout* table_ = nullptr;
  uint64_t seed_;
  std::unique_ptr<LivenessPage> liveness_;
  std::mutex claims_mutex_;  // claiming and freeing entries; a leaf
  std::unordered_map<uint64_t, TargetMrEntry*> mrs_;  // (device, rkey) -> entry
  std::atomic<uint32_t> no_calls_{0};  // pages_wanted_calls() without a table
};

}  // namespace softverbs
