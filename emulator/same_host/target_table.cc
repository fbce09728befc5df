#include "emulator/same_host/target_table.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <new>
#include <random>

#include "emulator/same_host/liveness_page.h"
#include "emulator/sync/shared_lock_word.h"

namespace softverbs {

uint64_t own_pid_namespace() {
  static const uint64_t ns = [] {
    struct stat st;
    return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
  }();
  return ns;
}

namespace {

// One field into a seal. Each step is a bijection of `h` for a given field
// and of the field for a given `h`, so changing any one field always
// changes the seal; and it is short, since an initiator seals three times
// per operation (a multiply and a shift, where a longer mix cost a sixth
// of a shared-pages WRITE).
uint64_t mix(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 32);
}

uint64_t fresh_seed() {
  std::random_device random;
  return (uint64_t{random()} << 32) ^ random() ^ 1;
}

// A free entry for `key` among those it may be found in, or nullptr.
template <typename Entry, size_t N>
Entry* claim_entry(Entry (&entries)[N], uint32_t key) {
  const uint32_t start = target_probe_start(key, N);
  for (uint32_t i = 0; i < kTargetProbeLength; ++i) {
    Entry& e = entries[(start + i) % N];
    if (shared_field(e.key).load(std::memory_order_relaxed) == 0) return &e;
  }
  return nullptr;
}

uint64_t mr_map_key(uint32_t device_index, uint32_t rkey) {
  return (uint64_t{device_index} << 32) | rkey;
}

}  // namespace

uint64_t seal_of(const TargetQpEntry& e, uint64_t seed) {
  uint64_t h = mix(seed, e.key);
  for (uint64_t v : {uint64_t{e.open}, uint64_t{e.expected_psn}, uint64_t{e.msn},
                     uint64_t{e.access_flags}, uint64_t{e.peer_key}, uint64_t{e.send_max}, e.pd,
                     uint64_t{e.generation}, uint64_t{e.takes_sends}})
    h = mix(h, v);
  return h;
}

uint64_t seal_of(const TargetMrEntry& e, uint64_t seed) {
  uint64_t h = mix(seed, e.key);
  for (uint64_t v : {uint64_t{e.device}, uint64_t{e.access}, e.pd, e.iova, e.length,
                     e.host_address, static_cast<uint64_t>(e.pages_fd), e.pages_inode,
                     e.pages_offset})
    h = mix(h, v);
  return h;
}

TargetQpEntry snapshot(const TargetQpEntry& e) {
  TargetQpEntry c{};
  c.key = e.key;
  c.open = e.open;
  c.expected_psn = e.expected_psn;
  c.msn = e.msn;
  c.access_flags = e.access_flags;
  c.peer_key = e.peer_key;
  c.send_max = e.send_max;
  c.pd = e.pd;
  c.generation = e.generation;
  c.takes_sends = e.takes_sends;
  c.seal = e.seal;
  return c;
}

TargetMrEntry snapshot(const TargetMrEntry& e) {
  TargetMrEntry c{};
  c.key = e.key;
  c.device = e.device;
  c.access = e.access;
  c.pd = e.pd;
  c.iova = e.iova;
  c.length = e.length;
  c.host_address = e.host_address;
  c.pages_fd = e.pages_fd;
  c.pages_inode = e.pages_inode;
  c.pages_offset = e.pages_offset;
  c.seal = e.seal;
  return c;
}

TargetTable::TargetTable(std::span<uint8_t> area) : seed_(fresh_seed()) {
  if (area.size() < sizeof(TargetTableLayout)) return;
  // Fresh shared memory is zeros, which every entry starts as.
  table_ = new (area.data()) TargetTableLayout;
  TargetTableHeader& h = table_->header;
  h.version = kTargetTableVersion;
  h.pid = static_cast<uint32_t>(getpid());
  h.pid_namespace = own_pid_namespace();
  h.seed = seed_;
  if (SharedPages::enabled()) {
    liveness_ = std::make_unique<LivenessPage>();
    if (liveness_->valid()) {
      h.liveness_fd = liveness_->fd();
      h.liveness_inode = liveness_->inode();
    }
  }
  shared_field(h.magic).store(kTargetTableMagic, std::memory_order_release);
}

TargetTable::~TargetTable() = default;

void TargetTable::hold_liveness() {
  if (liveness_) liveness_->hold();
}

void TargetTable::release_liveness() {
  if (liveness_) liveness_->release();
}

void TargetTable::set_accepting(bool accepting) {
  if (!table_) return;
  shared_field(table_->header.accepting).store(accepting ? 1 : 0, std::memory_order_release);
}

void TargetTable::set_taking_sends(bool taking) {
  if (!table_) return;
  shared_field(table_->header.sends_refused).store(taking ? 0 : 1, std::memory_order_release);
}

TargetQpEntry* TargetTable::add_qp(uint32_t device_index, uint32_t qpn) {
  if (!table_) return nullptr;
  const uint32_t key = target_qp_key(device_index, qpn);
  std::lock_guard claims(claims_mutex_);
  TargetQpEntry* e = claim_entry(table_->qps, key);
  if (!e) return nullptr;
  shared_lock_word::Guard lock(e->lock);
  e->open = 0;
  e->send_max = 0;
  e->takes_sends = 0;
  e->executed = 0;
  e->sends_placed = 0;
  TargetQpReceives& r = receives_of(e);
  shared_field(r.posted).store(0, std::memory_order_relaxed);
  shared_field(r.taken_by_packets).store(0, std::memory_order_relaxed);
  shared_field(r.sends_taken).store(0, std::memory_order_relaxed);
  shared_field(e->key).store(key, std::memory_order_release);
  reseal(*e, seed_);
  return e;
}

void TargetTable::remove_qp(TargetQpEntry* e) {
  if (!e) return;
  std::lock_guard claims(claims_mutex_);
  shared_lock_word::Guard lock(e->lock);
  e->open = 0;
  shared_field(e->key).store(0, std::memory_order_release);
}

void TargetTable::publish_mr(const TargetMemory& mr) {
  if (!table_ || mr.rkey == 0) return;
  std::lock_guard claims(claims_mutex_);
  TargetMrEntry* e = claim_entry(table_->mrs, mr.rkey);
  if (!e) return;
  {
    shared_lock_word::Guard lock(e->lock);
    e->device = mr.device_index + 1;
    e->access = mr.access;
    e->pd = mr.pd;
    e->iova = mr.iova;
    e->length = mr.length;
    e->host_address = mr.host_address;
    e->pages_fd = mr.pages ? mr.pages->fd : -1;
    e->pages_inode = mr.pages ? mr.pages->inode : 0;
    e->pages_offset = mr.pages ? mr.pages->offset : 0;
    shared_field(e->pages_wanted).store(0, std::memory_order_relaxed);
    shared_field(e->key).store(mr.rkey, std::memory_order_release);
    reseal(*e, seed_);
  }
  mrs_[mr_map_key(mr.device_index, mr.rkey)] = e;
}

void TargetTable::withdraw_mr(uint32_t device_index, uint32_t rkey) {
  if (!table_) return;
  std::lock_guard claims(claims_mutex_);
  auto it = mrs_.find(mr_map_key(device_index, rkey));
  if (it == mrs_.end()) return;
  TargetMrEntry* e = it->second;
  mrs_.erase(it);
  // Waits for an initiator's copy through it to end.
  shared_lock_word::Guard lock(e->lock);
  shared_field(e->key).store(0, std::memory_order_release);
  e->device = 0;
  e->length = 0;
}

TargetQpReceives& TargetTable::receives_of(TargetQpEntry* e) {
  return table_->receives[e - table_->qps];
}

bool TargetTable::pages_wanted(uint32_t device_index, uint32_t rkey) {
  std::lock_guard claims(claims_mutex_);
  auto it = mrs_.find(mr_map_key(device_index, rkey));
  return it != mrs_.end() &&
         shared_field(it->second->pages_wanted).load(std::memory_order_relaxed) != 0;
}

std::atomic<uint32_t>& TargetTable::pages_wanted_calls() {
  return table_ ? softverbs::pages_wanted_calls(table_->header) : no_calls_;
}

}  // namespace softverbs
