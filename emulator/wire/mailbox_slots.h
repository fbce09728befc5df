// How many frame slots this process's mailbox has: SOFTVERBS_MAILBOX_SLOTS,
// a power of two from kMinMailboxSlots to kMaxMailboxSlots, or
// kDefaultMailboxSlots when unset or empty. More slots let a peer run further ahead
// before its frames wait in its own memory; each costs sizeof(MailboxSlot)
// bytes of /dev/shm, reserved for as long as the process has the device
// open.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "emulator/types.h"

namespace softverbs {

inline constexpr const char* kMailboxSlotsVariable = "SOFTVERBS_MAILBOX_SLOTS";

// Parses a slot count (decimal). false, with `problem` saying what it must
// be, when it is not a power of two within the limits.
bool parse_mailbox_slots(std::string_view text, uint32_t& slots, std::string& problem);

// The count from the environment. EINVAL, with `problem` a sentence naming
// the variable, its value and what it must be, when the value is unusable.
Errno mailbox_slots_from_environment(uint32_t& slots, std::string& problem);

// The same, falling back to the default on a bad value: for estimates
// (how much /dev/shm a process needs), never for creating a mailbox.
uint32_t mailbox_slots_or_default();

}  // namespace softverbs
