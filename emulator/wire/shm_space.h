// Room in /dev/shm. Every segment softverbs creates has its memory reserved
// at creation (ShmSegment::create_exclusive), so a /dev/shm without room is
// an error when a device is opened, never a SIGBUS in the middle of
// traffic; this file turns that error into a message that says what is
// missing and how to make room.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace softverbs {

inline constexpr const char* kShmDirectory = "/dev/shm";

struct ShmSpace {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
};

// statvfs of /dev/shm. false when it cannot be read.
bool query_shm_space(ShmSpace& out);

// What one more process needs in /dev/shm: its mailbox, with the slot count
// the environment asks for.
size_t shm_bytes_per_process();
// What all processes of one user share: the registry.
size_t shm_registry_bytes();

// The message for a segment that could not be created for lack of room:
// which segment and its size, how full /dev/shm is, what each process needs,
// and the ways to make room. `space` null when unknown.
std::string shm_shortage_message(std::string_view segment, size_t segment_bytes,
                                 const ShmSpace* space);

// Writes shm_shortage_message, with /dev/shm as it is now, to stderr.
void report_shm_shortage(std::string_view segment, size_t segment_bytes);

}  // namespace softverbs
