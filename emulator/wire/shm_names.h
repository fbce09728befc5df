// Names of the POSIX shared-memory segments of softverbs. Every name carries
// the effective uid, so users never share a segment, and a prefix that tests
// (or parallel installations) can change with SOFTVERBS_SHM_PREFIX.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "emulator/types.h"

namespace softverbs {

inline constexpr const char* kShmPrefixVariable = "SOFTVERBS_SHM_PREFIX";
inline constexpr std::string_view kDefaultShmPrefix = "softverbs";

// The prefix in use: $SOFTVERBS_SHM_PREFIX, or "softverbs" when unset.
std::string shm_prefix();

// A prefix must make a single file name under /dev/shm: not empty, at most
// 64 characters, none of them '/' or a control character.
bool is_valid_shm_prefix(std::string_view prefix);

// EINVAL when $SOFTVERBS_SHM_PREFIX is set to something unusable, else 0.
Errno check_shm_prefix();

// "<prefix>-<euid>-": what every segment of this user starts with (no '/').
std::string shm_user_stem();

// "/<prefix>-<euid>-registry"
std::string registry_segment_name();
std::string registry_segment_name(const std::string& user_stem);

// "/<prefix>-<euid>-mbox-<slot>-<generation>"
std::string mailbox_segment_name(uint32_t slot, uint64_t generation);
std::string mailbox_segment_name(const std::string& user_stem, uint32_t slot,
                                 uint64_t generation);

// The part of a mailbox name before the slot: "<prefix>-<euid>-mbox-".
std::string mailbox_file_stem(const std::string& user_stem);

// Where the kernel shows a segment as a file: "/dev/shm" + name.
std::string shm_file_path(const std::string& segment_name);

}  // namespace softverbs
