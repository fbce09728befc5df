#include "emulator/wire/shm_registry.h"

#include <dirent.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <new>
#include <string_view>
#include <thread>
#include <vector>

#include "emulator/wire/process_identity.h"
#include "emulator/wire/shm_names.h"
#include "emulator/wire/shm_registry_access.h"
#include "emulator/wire/shm_space.h"

namespace softverbs {
namespace {

using Clock = std::chrono::steady_clock;

// How long an attacher waits for another process to finish creating the
// segment, and after how long it suspects that creator died half-way.
constexpr auto kAttachDeadline = std::chrono::seconds(10);
constexpr auto kSuspectCreatorAfter = std::chrono::milliseconds(200);
constexpr auto kAttachPollInterval = std::chrono::milliseconds(1);

Errno flock_retrying(int fd, int operation) {
  while (flock(fd, operation) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

// The segment we hold was unlinked (by a last user leaving, or by a cleanup
// of a half-created one) since we opened it: start over with a fresh one.
bool was_unlinked(const ShmSegment& segment, const std::string& name) {
  struct stat st;
  if (segment.stat(st) != 0) return true;
  return st.st_nlink == 0 || !segment_name_refers_to(name, st);
}

void initialize_layout(RegistryLayout& layout) {
  // Everything else is zero already (fresh segment).
  layout.version = kRegistryVersion;
  layout.max_slots = kMaxProcessSlots;
  layout.max_devices = kMaxRegistryDevices;
  layout.qpn_table_size = kQpnTableSize;
  layout.total_bytes = sizeof(RegistryLayout);
  shared(layout.magic).store(kRegistryMagic, std::memory_order_release);
}

bool layout_matches(const RegistryLayout& layout) {
  return layout.version == kRegistryVersion && layout.max_slots == kMaxProcessSlots &&
         layout.max_devices == kMaxRegistryDevices && layout.qpn_table_size == kQpnTableSize &&
         layout.total_bytes == sizeof(RegistryLayout);
}

// An attacher that did not create the segment: waits until its creator has
// sized, initialized and published it, then maps it. ESTALE: the segment was
// unlinked or abandoned, start over.
Errno wait_until_published(ShmSegment& segment, const std::string& name,
                           Clock::time_point deadline) {
  const auto started = Clock::now();
  for (;;) {
    struct stat st;
    if (Errno err = segment.stat(st); err != 0) return err;
    if (st.st_nlink == 0) return ESTALE;
    if (st.st_size != 0 && static_cast<size_t>(st.st_size) != sizeof(RegistryLayout)) {
      return EPROTO;
    }
    if (st.st_size != 0 && segment.address() == nullptr) {
      if (Errno err = segment.map(sizeof(RegistryLayout)); err != 0) return err;
    }
    if (segment.address() != nullptr) {
      auto& layout = *static_cast<RegistryLayout*>(segment.address());
      if (shared(layout.magic).load(std::memory_order_acquire) == kRegistryMagic) return 0;
    }
    const auto now = Clock::now();
    if (now - started > kSuspectCreatorAfter) {
      // The creator holds a shared lock from right after creating the
      // segment until it leaves; if we can lock exclusively, it is gone.
      if (flock(segment.descriptor(), LOCK_EX | LOCK_NB) == 0) {
        if (segment_name_refers_to(name, st)) unlink_segment(name);
        flock(segment.descriptor(), LOCK_UN);
        return ESTALE;
      }
    }
    if (now > deadline) return EAGAIN;
    std::this_thread::sleep_for(kAttachPollInterval);
  }
}

// Opens the registry segment `name`, creating it when there is none
// (`creator`). ESTALE: it went away in between, start over.
Errno open_or_create(const std::string& name, ShmSegment& segment, bool& creator) {
  creator = false;
  Errno err = ShmSegment::create_exclusive(name, sizeof(RegistryLayout), segment);
  if (err == 0) {
    creator = true;
    return 0;
  }
  if (err == ENOSPC) report_shm_shortage("registry", sizeof(RegistryLayout));
  if (err != EEXIST) return err;
  err = ShmSegment::open_existing(name, segment);
  return err == ENOENT ? ESTALE : err;  // unlinked in between
}

// Makes the opened segment ready: its creator initializes it, anyone else
// waits for that; either then holds it (a shared lock), so a last user
// leaving can no longer remove it under us. ESTALE: it was removed or
// abandoned before we held it, start over.
Errno set_up(ShmSegment& segment, const std::string& name, const std::string& user_stem,
             bool creator, Clock::time_point deadline) {
  if (!creator) {
    if (Errno err = wait_until_published(segment, name, deadline); err != 0) return err;
  }
  if (Errno err = flock_retrying(segment.descriptor(), LOCK_SH); err != 0) return err;
  if (was_unlinked(segment, name)) return ESTALE;
  if (!creator) {
    return layout_matches(*static_cast<RegistryLayout*>(segment.address())) ? 0 : EPROTO;
  }
  if (Errno err = segment.map(sizeof(RegistryLayout)); err != 0) {
    unlink_segment(name);
    return err;
  }
  // No registry means no process is attached: any mailbox still named like
  // ours was left by processes of an earlier registry.
  remove_stray_mailboxes(user_stem);
  initialize_layout(*static_cast<RegistryLayout*>(segment.address()));
  return 0;
}

}  // namespace

std::vector<std::string> remove_stray_mailboxes(const std::string& user_stem) {
  const std::string stem = mailbox_file_stem(user_stem);
  auto is_mailbox_suffix = [](std::string_view rest) {
    // <digits>-<digits>
    const size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string_view::npos || dash + 1 == rest.size()) return false;
    auto digits = [](std::string_view part) {
      return std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    return digits(rest.substr(0, dash)) && digits(rest.substr(dash + 1));
  };
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return {};
  std::vector<std::string> strays;
  while (const dirent* entry = readdir(dir)) {
    std::string_view file(entry->d_name);
    if (file.size() > stem.size() && file.substr(0, stem.size()) == stem &&
        is_mailbox_suffix(file.substr(stem.size()))) {
      strays.emplace_back(file);
    }
  }
  closedir(dir);
  for (const std::string& file : strays) unlink_segment("/" + file);
  return strays;
}


ShmRegistry::ShmRegistry(ShmSegment segment, struct stat identity, std::string user_stem)
    : segment_(std::move(segment)),
      layout_(static_cast<RegistryLayout*>(segment_.address())),
      identity_(identity),
      user_stem_(std::move(user_stem)),
      name_(registry_segment_name(user_stem_)),
      attached_pid_(getpid()) {
  enroll();
}

std::string ShmRegistry::segment_name() { return registry_segment_name(); }

std::string ShmRegistry::mailbox_name(const ProcessRef& process) {
  return mailbox_segment_name(process.slot, process.generation);
}

std::string ShmRegistry::mailbox_name_of(const ProcessRef& process) const {
  return mailbox_segment_name(user_stem_, process.slot, process.generation);
}

std::unique_ptr<ShmRegistry> ShmRegistry::attach(Errno& err) {
  if ((err = check_shm_prefix()) != 0) return nullptr;
  try {
    const std::string user_stem = shm_user_stem();
    const std::string name = registry_segment_name(user_stem);
    const auto deadline = Clock::now() + kAttachDeadline;
    for (;;) {
      if (Clock::now() > deadline) {
        err = EAGAIN;
        return nullptr;
      }
      ShmSegment segment;
      bool creator = false;
      err = open_or_create(name, segment, creator);
      if (err == 0) err = set_up(segment, name, user_stem, creator, deadline);
      if (err == ESTALE) continue;
      if (err != 0) return nullptr;
      struct stat identity;
      if ((err = segment.stat(identity)) != 0) return nullptr;
      std::unique_ptr<ShmRegistry> registry(
          new (std::nothrow) ShmRegistry(std::move(segment), identity, user_stem));
      if (!registry) {
        err = ENOMEM;
        return nullptr;
      }
      if ((err = registry->claim_slot()) != 0) return nullptr;  // destructor detaches
      sweep_abandoned(user_stem);
      return registry;
    }
  } catch (const std::bad_alloc&) {
    err = ENOMEM;
    return nullptr;
  }
}

ShmRegistry::~ShmRegistry() {
  detach();
  withdraw();
}

Errno ShmRegistry::claim_slot() {
  Lock lock(*this);
  if (lock.error() != 0) return lock.error();
  reclaim_dead_slots_locked();
  for (uint32_t slot = 0; slot < kMaxProcessSlots; ++slot) {
    RegistryProcessSlot& entry = layout().slots[slot];
    if (load_shared(entry.generation) != 0) continue;
    // Alive in every namespace's eyes before the slot shows as taken.
    if (hold_liveness_lock(slot) != 0) continue;  // a holder we failed to see die
    const uint64_t generation = ++layout().last_generation;
    const auto pid = static_cast<uint32_t>(getpid());
    shared(entry.pid).store(pid);
    shared(entry.start_time).store(own_start_time());
    entry.qpn_count = 0;
    shared(entry.generation).store(generation);  // the slot is taken from here on
    self_ = ProcessRef{slot, pid, generation};
    return 0;
  }
  return EAGAIN;
}

void ShmRegistry::detach() {
  if (layout_ == nullptr) return;
  leave();
  layout_ = nullptr;
  segment_ = ShmSegment();  // unmaps, closes (and so drops the lock)
}

void ShmRegistry::leave() {
  if (layout_ == nullptr || left_) return;
  left_ = true;
  // A forked copy: the slot and the lock belong to the parent.
  if (getpid() != attached_pid_) return;
  if (self_.generation != 0) {
    Lock lock(*this);
    if (lock.error() == 0) {
      clear_slot_locked(self_.slot);
      reclaim_dead_slots_locked();
    }
    self_ = ProcessRef{};
  }
  // Every attached process holds a shared lock. If ours converts to an
  // exclusive one, nobody else is attached: whatever slot is still taken
  // belongs to a dead process. Tidy up and remove the segment. (A failed
  // conversion may drop our shared lock; we are leaving anyway.)
  if (flock(segment_.descriptor(), LOCK_EX | LOCK_NB) == 0) {
    {
      Lock lock(*this);
      if (lock.error() == 0) {
        for (uint32_t slot = 0; slot < kMaxProcessSlots; ++slot) {
          if (load_shared(layout().slots[slot].generation) != 0) clear_slot_locked(slot);
        }
      }
    }
    remove_stray_mailboxes(user_stem_);
    if (segment_name_refers_to(name_, identity_)) unlink_segment(name_);
  }
}

void ShmRegistry::reclaim_dead_slots_locked() {
  for (uint32_t slot = 0; slot < kMaxProcessSlots; ++slot) {
    if (slot == self_.slot && self_.generation != 0) continue;
    const RegistryProcessSlot& entry = layout().slots[slot];
    if (load_shared(entry.generation) == 0) continue;
    if (!holder_alive(slot)) clear_slot_locked(slot);
  }
}

// Frees a slot with everything it holds, in an order that a crash half-way
// leaves a slot that is still taken and gets cleared again later.
void ShmRegistry::clear_slot_locked(uint32_t slot) {
  RegistryProcessSlot& entry = layout().slots[slot];
  const uint64_t generation = load_shared(entry.generation);
  if (generation == 0) return;
  if (entry.qpn_count != 0) {
    const auto owner_mark = static_cast<uint8_t>(slot + 1);
    for (uint32_t device = 0; device < kMaxRegistryDevices; ++device) {
      for (uint32_t qpn = kFirstAllocatableQpn; qpn < kQpnTableSize; ++qpn) {
        uint8_t& owner = layout().qpn_owner[device][qpn];
        if (load_shared(owner) == owner_mark) shared(owner).store(0);
      }
    }
    entry.qpn_count = 0;
  }
  for (RegistryMulticastAttachment& entry : layout().multicast)
    if (load_shared(entry.owner) == slot + 1) shared(entry.owner).store(0);
  for (RegistryCmBinding& binding : layout().cm_bindings)
    if (load_shared(binding.owner) == slot + 1) shared(binding.owner).store(0);
  unlink_segment(mailbox_segment_name(user_stem_, slot, generation));
  shared(entry.generation).store(0);  // free from here on
  shared(entry.pid).store(0);
  shared(entry.start_time).store(0);
}

Errno ShmRegistry::allocate_qpn(uint32_t device_index, uint32_t& qpn) {
  if (device_index >= kMaxRegistryDevices || self_.generation == 0) return EINVAL;
  Lock lock(*this);
  if (lock.error() != 0) return lock.error();
  reclaim_dead_slots_locked();
  uint32_t& cursor = layout().next_qpn[device_index];
  if (cursor < kFirstAllocatableQpn || cursor >= kQpnTableSize) cursor = kFirstAllocatableQpn;
  auto* owners = layout().qpn_owner[device_index];
  for (uint32_t step = 0; step < kQpnsPerDevice; ++step) {
    const uint32_t candidate =
        kFirstAllocatableQpn + (cursor - kFirstAllocatableQpn + step) % kQpnsPerDevice;
    if (load_shared(owners[candidate]) != 0) continue;
    ++layout().slots[self_.slot].qpn_count;  // before the entry: never undercount
    shared(owners[candidate]).store(static_cast<uint8_t>(self_.slot + 1));
    cursor = candidate + 1;
    qpn = candidate;
    return 0;
  }
  return EAGAIN;
}

void ShmRegistry::release_qpn(uint32_t device_index, uint32_t qpn) {
  if (device_index >= kMaxRegistryDevices || qpn < kFirstAllocatableQpn || qpn >= kQpnTableSize ||
      self_.generation == 0) {
    return;
  }
  Lock lock(*this);
  if (lock.error() != 0) return;
  uint8_t& owner = layout().qpn_owner[device_index][qpn];
  if (load_shared(owner) != self_.slot + 1) return;
  shared(owner).store(0);
  RegistryProcessSlot& entry = layout().slots[self_.slot];
  if (entry.qpn_count != 0) --entry.qpn_count;  // after the entry: never undercount
}

// A seqlock read: pid and start time only change while the generation is 0,
// and generations are never reused, so equal non-zero generations before and
// after mean the fields in between belong to that generation. A slot that
// keeps changing under the reader (no correct process changes one that
// fast) reads as free.
bool ShmRegistry::read_slot(uint32_t slot, uint64_t& generation, uint32_t& pid,
                            uint64_t& start_time) const {
  constexpr int kReadAttempts = 64;
  if (slot >= kMaxProcessSlots) return false;
  const RegistryProcessSlot& entry = layout().slots[slot];
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    const uint64_t before = load_shared(entry.generation);
    if (before == 0) return false;
    pid = load_shared(entry.pid);
    start_time = load_shared(entry.start_time);
    if (load_shared(entry.generation) == before) {
      generation = before;
      return true;
    }
  }
  return false;
}

bool ShmRegistry::find_qpn_owner(uint32_t device_index, uint32_t qpn, ProcessRef& owner) const {
  if (device_index >= kMaxRegistryDevices || qpn < kFirstAllocatableQpn || qpn >= kQpnTableSize) {
    return false;
  }
  const uint8_t mark = load_shared(layout().qpn_owner[device_index][qpn]);
  if (mark == 0) return false;
  uint64_t generation = 0;
  uint32_t pid = 0;
  uint64_t start_time = 0;
  if (!read_slot(mark - 1u, generation, pid, start_time)) return false;
  owner = ProcessRef{mark - 1u, pid, generation};
  return true;
}

bool ShmRegistry::lookup_qpn(uint32_t device_index, uint32_t qpn, ProcessRef& owner) const {
  ProcessRef candidate;
  if (!find_qpn_owner(device_index, qpn, candidate) || !is_alive(candidate)) return false;
  owner = candidate;
  return true;
}

bool ShmRegistry::is_alive(const ProcessRef& process) const {
  uint64_t generation = 0;
  uint32_t pid = 0;
  uint64_t start_time = 0;
  if (!read_slot(process.slot, generation, pid, start_time)) return false;
  if (generation != process.generation) return false;
  if (process.slot == self_.slot && generation == self_.generation) return true;
  return holder_alive(process.slot);
}

// ---- multicast attachments
//
// The table is written by other processes: each entry is read once, into a
// copy, and the copy is checked before anything uses it.

namespace {

struct Attachment {
  Gid gid{};
  uint32_t qpn = 0;
  uint32_t device = 0;
  uint32_t owner = 0;  // slot + 1; 0: free
  uint16_t lid = 0;
};

Attachment read_attachment(const RegistryMulticastAttachment& entry) {
  Attachment a;
  for (size_t i = 0; i < a.gid.size(); ++i) a.gid[i] = load_shared(entry.gid[i]);
  a.qpn = load_shared(entry.qpn);
  a.device = load_shared(entry.device);
  a.owner = load_shared(entry.owner);
  a.lid = load_shared(entry.lid);
  if (a.device >= kMaxRegistryDevices || a.qpn < kFirstAllocatableQpn || a.qpn >= kQpnTableSize)
    a.owner = 0;  // no correct process wrote this: treated as free
  return a;
}

bool same_member(const Attachment& a, uint32_t device, const Gid& gid, uint16_t lid,
                 uint32_t qpn) {
  return a.device == device && a.qpn == qpn && a.lid == lid && a.gid == gid;
}

}  // namespace

Errno ShmRegistry::attach_multicast(uint32_t device_index, const Gid& gid, uint16_t lid,
                                    uint32_t qpn) {
  if (device_index >= kMaxRegistryDevices || self_.generation == 0) return EINVAL;
  Lock lock(*this);
  if (lock.error() != 0) return lock.error();
  reclaim_dead_slots_locked();
  RegistryMulticastAttachment* free_entry = nullptr;
  uint32_t group_members = 0;
  std::vector<Gid> groups;  // distinct groups with members
  for (RegistryMulticastAttachment& entry : layout().multicast) {
    const Attachment a = read_attachment(entry);
    if (a.owner == 0) {
      if (!free_entry) free_entry = &entry;
      continue;
    }
    if (same_member(a, device_index, gid, lid, qpn)) return 0;  // attached already
    if (a.gid == gid) ++group_members;
    if (std::find(groups.begin(), groups.end(), a.gid) == groups.end()) groups.push_back(a.gid);
  }
  const bool new_group = std::find(groups.begin(), groups.end(), gid) == groups.end();
  if (!free_entry || group_members >= kMaxMulticastQpsPerGroup ||
      (new_group && groups.size() >= kMaxMulticastGroups))
    return ENOMEM;
  std::copy(gid.begin(), gid.end(), free_entry->gid);
  free_entry->qpn = qpn;
  free_entry->device = static_cast<uint8_t>(device_index);
  free_entry->lid = lid;
  shared(free_entry->owner).store(static_cast<uint8_t>(self_.slot + 1));  // last
  return 0;
}

Errno ShmRegistry::detach_multicast(uint32_t device_index, const Gid& gid, uint16_t lid,
                                    uint32_t qpn) {
  if (device_index >= kMaxRegistryDevices || self_.generation == 0) return EINVAL;
  Lock lock(*this);
  if (lock.error() != 0) return lock.error();
  for (RegistryMulticastAttachment& entry : layout().multicast) {
    const Attachment a = read_attachment(entry);
    if (a.owner == self_.slot + 1 && same_member(a, device_index, gid, lid, qpn)) {
      shared(entry.owner).store(0);
      return 0;
    }
  }
  return EINVAL;
}

Errno ShmRegistry::multicast_members(const Gid* gid, uint16_t lid,
                                     std::vector<MulticastMember>& out) const {
  out.clear();
  Lock lock(*this);
  if (lock.error() != 0) return lock.error();
  for (const RegistryMulticastAttachment& entry : layout().multicast) {
    const Attachment a = read_attachment(entry);
    if (a.owner == 0) continue;
    if (gid ? a.gid != *gid : a.lid != lid) continue;
    out.push_back(MulticastMember{a.device, a.qpn, a.owner - 1u});
  }
  return 0;
}

}  // namespace softverbs
