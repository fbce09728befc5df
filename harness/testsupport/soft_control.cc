#include "harness/testsupport/soft_control.h"

#include <dlfcn.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <vector>

#include "provider/include/softverbs/control.h"

namespace softverbs::testsupport {
namespace {

softverbs_control_fn control_function() {
  // Looked up once: the library is either preloaded from the start or not.
  static const softverbs_control_fn function =
      reinterpret_cast<softverbs_control_fn>(dlsym(RTLD_DEFAULT, SOFTVERBS_CONTROL_SYMBOL));
  return function;
}

// The line of `text` that starts with `prefix` (leading spaces ignored).
std::optional<std::string_view> line_starting_with(std::string_view text,
                                                   std::string_view prefix) {
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (line.starts_with(prefix)) return line;
  }
  return std::nullopt;
}

// The number after " name=" in `line`.
std::optional<uint64_t> counter_in(std::string_view line, std::string_view name) {
  const std::string key = " " + std::string(name) + "=";
  const size_t at = line.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  const char* first = line.data() + at + key.size();
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(first, line.data() + line.size(), value);
  if (ec != std::errc() || end == first) return std::nullopt;
  return value;
}

}  // namespace

bool soft_control_available() { return control_function() != nullptr; }

Errno soft_control(std::string_view request, std::string& reply) {
  reply.clear();
  const softverbs_control_fn control = control_function();
  if (!control) return ENOSYS;
  const std::string text(request);
  std::vector<char> buffer(1 << 16);
  for (;;) {
    const int rc = control(text.c_str(), buffer.data(), buffer.size());
    // A `stats` reply grows with the number of QPs; ask again with room.
    if (rc == ENOSPC && buffer.size() < (1u << 24)) {
      buffer.resize(buffer.size() * 4);
      continue;
    }
    reply = buffer.data();
    return rc;
  }
}

Errno soft_control(std::string_view request) {
  std::string reply;
  return soft_control(request, reply);
}

SoftControlReset::~SoftControlReset() {
  if (!soft_control_available()) return;
  soft_control("fault clear");
  soft_control("rnr off");
  if (device_name_.empty()) return;
  soft_control("port " + device_name_ + " up");
  soft_control("port " + device_name_ + " 2 up");  // refused on a one-port device
}

std::optional<uint64_t> qp_counter(std::string_view stats, uint32_t qpn, std::string_view name) {
  char prefix[24];
  std::snprintf(prefix, sizeof prefix, "qp 0x%06x ", qpn);
  const auto line = line_starting_with(stats, prefix);
  if (!line) return std::nullopt;
  return counter_in(*line, name);
}

std::optional<uint64_t> line_counter(std::string_view stats, std::string_view line_label,
                                     std::string_view name) {
  const auto line = line_starting_with(stats, line_label);
  if (!line) return std::nullopt;
  return counter_in(*line, name);
}

}  // namespace softverbs::testsupport
