#include "emulator/wire/shm_names.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace softverbs {

std::string shm_prefix() {
  const char* value = std::getenv(kShmPrefixVariable);
  if (value == nullptr) return std::string(kDefaultShmPrefix);
  return value;
}

bool is_valid_shm_prefix(std::string_view prefix) {
  if (prefix.empty() || prefix.size() > 64) return false;
  for (char c : prefix) {
    if (c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

Errno check_shm_prefix() { return is_valid_shm_prefix(shm_prefix()) ? 0 : EINVAL; }

std::string shm_user_stem() {
  return shm_prefix() + "-" + std::to_string(geteuid()) + "-";
}

std::string registry_segment_name() { return registry_segment_name(shm_user_stem()); }

std::string registry_segment_name(const std::string& user_stem) {
  return "/" + user_stem + "registry";
}

std::string mailbox_segment_name(uint32_t slot, uint64_t generation) {
  return mailbox_segment_name(shm_user_stem(), slot, generation);
}

std::string mailbox_segment_name(const std::string& user_stem, uint32_t slot,
                                 uint64_t generation) {
  return "/" + mailbox_file_stem(user_stem) + std::to_string(slot) + "-" +
         std::to_string(generation);
}

std::string mailbox_file_stem(const std::string& user_stem) { return user_stem + "mbox-"; }

std::string shm_file_path(const std::string& segment_name) { return "/dev/shm" + segment_name; }

}  // namespace softverbs
