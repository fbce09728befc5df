#include "emulator/wire/shm_space.h"

#include <sys/statvfs.h>

#include <cstdio>

#include "emulator/wire/mailbox_slots.h"
#include "emulator/wire/shm_mailbox_layout.h"
#include "emulator/wire/shm_registry_layout.h"

namespace softverbs {
namespace {

std::string mebibytes(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

}  // namespace

bool query_shm_space(ShmSpace& out) {
  struct statvfs stats;
  if (statvfs(kShmDirectory, &stats) != 0) return false;
  out.free_bytes = static_cast<uint64_t>(stats.f_bavail) * stats.f_frsize;
  out.total_bytes = static_cast<uint64_t>(stats.f_blocks) * stats.f_frsize;
  return true;
}

size_t shm_bytes_per_process() { return mailbox_segment_bytes(mailbox_slots_or_default()); }

size_t shm_registry_bytes() { return sizeof(RegistryLayout); }

std::string shm_shortage_message(std::string_view segment, size_t segment_bytes,
                                 const ShmSpace* space) {
  const uint32_t slots = mailbox_slots_or_default();
  std::string text = "softverbs: no room in /dev/shm for the ";
  text.append(segment).append(" (").append(mebibytes(segment_bytes)).append(")");
  if (space != nullptr) {
    text += ": /dev/shm has " + mebibytes(space->free_bytes) + " free of " +
            mebibytes(space->total_bytes);
  }
  text += ".\nsoftverbs: each process needs " + mebibytes(shm_bytes_per_process()) +
          " there for its mailbox (" + std::to_string(slots) +
          " slots), and the processes of one user share a " + mebibytes(shm_registry_bytes()) +
          " registry (16 processes: " +
          mebibytes(shm_registry_bytes() + 16 * shm_bytes_per_process()) + ").\n";
  text += "softverbs: make /dev/shm larger (docker run --shm-size=256m ...; as root: "
          "mount -o remount,size=256m /dev/shm), end softverbs processes you no longer need, "
          "or give each process a smaller mailbox with " +
          std::string(kMailboxSlotsVariable) + "=N (a power of two from " +
          std::to_string(kMinMailboxSlots) + " to " + std::to_string(kMaxMailboxSlots) +
          "; " + std::to_string(sizeof(MailboxSlot)) + " bytes a slot).\n";
  return text;
}

void report_shm_shortage(std::string_view segment, size_t segment_bytes) {
  ShmSpace space;
  const bool known = query_shm_space(space);
  const std::string text = shm_shortage_message(segment, segment_bytes, known ? &space : nullptr);
  std::fputs(text.c_str(), stderr);
}

}  // namespace softverbs
