// What the process's address space holds, as memory registration needs to
// know it: the kernel pins the pages of an MR when it is registered and
// fails with EFAULT when part of the range is not mapped, or not writable
// while the MR grants a write access. A soft HCA pins nothing, so it asks
// the kernel's list of mappings instead (/proc/self/maps).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace softverbs {

// True when every byte of [addr, addr+length) lies in a mapping that can be
// read, and written too when `writable`.
bool range_is_mapped(uint64_t addr, uint64_t length, bool writable);

// One line of /proc/self/maps.
struct MappedRange {
  uint64_t begin = 0, end = 0;
  bool readable = false, writable = false;
  bool shared = false;   // MAP_SHARED ('s'), else private
  uint64_t offset = 0;   // in the file mapped
  uint64_t inode = 0;    // of the file; 0 for anonymous memory
  std::string path;      // empty for anonymous memory; "[heap]", "/memfd:name (deleted)", ...
};

// The mappings that overlap [addr, addr+length), in address order.
std::vector<MappedRange> mappings_over(uint64_t addr, uint64_t length);

}  // namespace softverbs
