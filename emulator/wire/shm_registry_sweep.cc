// ShmRegistry::sweep_abandoned: the segments that processes of this user
// left under other prefixes. A registry removes its own dead processes'
// segments, but one whose every process ended (killed, or by _exit(), which
// runs no destructor) stays until a process of the same prefix comes, and
// CI jobs that give every run a prefix of its own never send one.
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "emulator/wire/shm_names.h"
#include "emulator/wire/shm_registry.h"
#include "emulator/wire/shm_registry_access.h"
#include "emulator/wire/shm_segment.h"

namespace softverbs {
namespace {

constexpr std::string_view kRegistrySuffix = "registry";

// "<prefix>-<euid>-" of every registry file of this user in /dev/shm.
std::vector<std::string> user_stems_with_a_registry() {
  char uid_text[24];
  std::snprintf(uid_text, sizeof uid_text, "-%u-", static_cast<unsigned>(geteuid()));
  const std::string_view uid_part = uid_text;
  std::vector<std::string> stems;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return stems;
  while (const dirent* entry = readdir(dir)) {
    const std::string_view file(entry->d_name);
    if (file.size() <= kRegistrySuffix.size() + uid_part.size() ||
        !file.ends_with(kRegistrySuffix))
      continue;
    const std::string_view stem = file.substr(0, file.size() - kRegistrySuffix.size());
    if (stem.ends_with(uid_part)) stems.emplace_back(stem);
  }
  closedir(dir);
  return stems;
}

// True when the registry segment is one of this version's, initialized: a
// registry of another version, a damaged one or one still being created is
// not ours to judge (softverbs reset is).
bool is_published_registry(ShmSegment& segment, const struct stat& st) {
  if (static_cast<size_t>(st.st_size) != sizeof(RegistryLayout) || st.st_uid != geteuid())
    return false;
  if (segment.map(sizeof(RegistryLayout)) != 0) return false;
  const auto& layout = *static_cast<const RegistryLayout*>(segment.address());
  return load_shared(layout.magic) == kRegistryMagic;
}

}  // namespace

std::vector<std::string> ShmRegistry::sweep_abandoned(const std::string& own_stem) {
  std::vector<std::string> removed;
  for (const std::string& stem : user_stems_with_a_registry()) {
    if (stem == own_stem) continue;  // attach() and the last user leaving see to it
    const std::string name = registry_segment_name(stem);
    ShmSegment segment;
    if (ShmSegment::open_existing(name, segment) != 0) continue;
    struct stat st;
    if (segment.stat(st) != 0 || !is_published_registry(segment, st)) continue;
    // Every attached process holds a shared lock, released by the kernel
    // when it dies: an exclusive one means none is left. An attacher that
    // comes now finds the name unlinked once it has its shared lock, and
    // starts over with a registry of its own, as after a last user left.
    if (flock(segment.descriptor(), LOCK_EX | LOCK_NB) != 0) continue;
    if (segment_name_refers_to(name, st)) {
      unlink_segment(name);
      removed.push_back(shm_file_path(name));
      for (const std::string& file : remove_stray_mailboxes(stem))
        removed.push_back("/dev/shm/" + file);
    }
    flock(segment.descriptor(), LOCK_UN);
  }
  return removed;
}

}  // namespace softverbs
