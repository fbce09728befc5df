#include "emulator/wire/mailbox_slots.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>

#include "emulator/wire/shm_mailbox_layout.h"

namespace softverbs {

bool parse_mailbox_slots(std::string_view text, uint32_t& slots, std::string& problem) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end || !is_valid_mailbox_slot_count(value)) {
    problem = "must be a power of two from " + std::to_string(kMinMailboxSlots) + " to " +
              std::to_string(kMaxMailboxSlots);
    return false;
  }
  slots = static_cast<uint32_t>(value);
  return true;
}

Errno mailbox_slots_from_environment(uint32_t& slots, std::string& problem) {
  const char* text = std::getenv(kMailboxSlotsVariable);
  if (text == nullptr || *text == '\0') {
    slots = kDefaultMailboxSlots;
    return 0;
  }
  std::string why;
  if (!parse_mailbox_slots(text, slots, why)) {
    problem = std::string(kMailboxSlotsVariable) + "='" + text + "': " + why + " (default " +
              std::to_string(kDefaultMailboxSlots) + ")";
    return EINVAL;
  }
  return 0;
}

uint32_t mailbox_slots_or_default() {
  uint32_t slots = kDefaultMailboxSlots;
  std::string ignored;
  if (mailbox_slots_from_environment(slots, ignored) != 0) slots = kDefaultMailboxSlots;
  return slots;
}

}  // namespace softverbs
