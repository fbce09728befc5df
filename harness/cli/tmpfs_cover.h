// Covering a directory one cannot write to (/sys/class, /dev) with a tmpfs
// that still shows everything that was there, so that new entries can be
// added beside the old ones. Needs a private mount namespace.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

namespace softverbs::cli {

// Whether an entry of the opened subdirectory is left out (by name and
// S_IFMT type): entries a previous cover added that are about to be made
// again.
using EntryFilter = bool (*)(std::string_view name, mode_t type);

// Mounts a tmpfs on `dir` and puts every entry of the old `dir` back:
// symbolic links as copies, everything else bind-mounted from the original
// (so /dev/shm stays the one tmpfs every process shares). `open_subdir`
// becomes a directory of the tmpfs itself (created if it did not exist),
// with the old one's entries put back the same way, except those `drop`
// rejects. Returns "" or why not; on failure nothing stays mounted.
std::string cover_with_tmpfs(const std::string& dir, const std::string& open_subdir,
                             EntryFilter drop);

// Remounts the tmpfs on `dir` read-only once it is filled in.
std::string seal_cover(const std::string& dir);

}  // namespace softverbs::cli
