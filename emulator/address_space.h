// What the process's address space holds, as memory registration needs to
// know it: the kernel pins the pages of an MR when it is registered and
// fails with EFAULT when part of the range is not mapped, or not writable
// while the MR grants a write access. A soft HCA pins nothing, so it asks
// the kernel's list of mappings instead (/proc/self/maps).
#pragma once

#include <cstdint>

namespace softverbs {

// True when every byte of [addr, addr+length) lies in a mapping that can be
// read, and written too when `writable`.
bool range_is_mapped(uint64_t addr, uint64_t length, bool writable);

}  // namespace softverbs
