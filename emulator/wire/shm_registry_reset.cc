// ShmRegistry::reset: removing a registry no process should keep using.
#include <sys/file.h>
#include <sys/mman.h>

#include <cerrno>

#include "emulator/wire/shm_names.h"
#include "emulator/wire/shm_registry.h"
#include "emulator/wire/shm_registry_access.h"

namespace softverbs {
namespace {

// The pids in the registry's taken slots, if its header is one we can read.
std::vector<uint32_t> attached_pids(ShmSegment& segment) {
  struct stat st;
  if (segment.stat(st) != 0 || static_cast<size_t>(st.st_size) != sizeof(RegistryLayout) ||
      segment.map(sizeof(RegistryLayout)) != 0)
    return {};
  const auto& layout = *static_cast<const RegistryLayout*>(segment.address());
  std::vector<uint32_t> pids;
  if (load_shared(layout.magic) != kRegistryMagic) return pids;
  for (const RegistryProcessSlot& slot : layout.slots)
    if (load_shared(slot.generation) != 0) pids.push_back(load_shared(slot.pid));
  return pids;
}

}  // namespace

Errno ShmRegistry::reset(bool force, ResetReport& report) {
  if (Errno err = check_shm_prefix()) return err;
  const std::string user_stem = shm_user_stem();
  const std::string name = registry_segment_name(user_stem);
  report = ResetReport{};
  report.registry = shm_file_path(name);
  ShmSegment segment;
  const Errno opened = ShmSegment::open_existing(name, segment);
  if (opened == EACCES) {
    // Not mode 0600 or not ours: no program can use it, nobody is attached.
    if (shm_unlink(name.c_str()) != 0) return errno;
    report.removed.push_back(report.registry);
  } else if (opened != 0 && opened != ENOENT) {
    return opened;
  }
  if (opened == 0) {
    // Every attached process holds a shared flock: an exclusive one means
    // none is attached (the same test the last user leaving makes).
    const bool in_use = flock(segment.descriptor(), LOCK_EX | LOCK_NB) != 0;
    if (in_use) {
      report.attached_pids = attached_pids(segment);
      if (!force) return EBUSY;
    }
    unlink_segment(name);
    report.removed.push_back(report.registry);
  }
  for (const std::string& file : remove_stray_mailboxes(user_stem))
    report.removed.push_back("/dev/shm/" + file);
  return 0;
}

}  // namespace softverbs
