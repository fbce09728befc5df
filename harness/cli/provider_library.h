// Where libsoftverbs.so is, and the LD_PRELOAD value that loads it.
#pragma once

#include <string>
#include <vector>

namespace softverbs::cli {

struct LibraryLookup {
  std::string path;                   // absolute; empty when not found
  std::vector<std::string> searched;  // every place looked at, in order
  bool from_environment = false;      // SOFTVERBS_LIBRARY named it
};

// SOFTVERBS_LIBRARY when set (and then only there), else next to this
// executable: <exe dir>/../../provider/libsoftverbs.so in a build tree,
// <exe dir>/../lib/libsoftverbs.so once installed.
LibraryLookup find_provider_library();

// A readable explanation of a failed lookup, with how to get the library.
std::string describe_missing_library(const LibraryLookup& lookup);

// The LD_PRELOAD value for a program: `preloads` first, in order, then the
// entries of `existing` that are not among them (ld.so accepts ':' and ' '
// as separators).
std::string compose_ld_preload(const std::vector<std::string>& preloads, const char* existing);

// ld.so splits LD_PRELOAD at ':' and ' ', so such paths cannot be preloaded.
bool is_preloadable_path(const std::string& path);

}  // namespace softverbs::cli
