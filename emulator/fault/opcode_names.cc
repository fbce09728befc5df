#include "emulator/fault/opcode_names.h"

#include <cctype>
#include <charconv>

#include "emulator/packet/headers.h"

namespace softverbs::fault {
namespace {

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
    text.replace(at, from.size(), to);
    at += to.size();
  }
}

// One spelling per opcode: upper case, transport prefix always present,
// no RDMA_, short _IMM/_INV suffixes.
std::string canonical_spelling(std::string_view name) {
  std::string text;
  for (char c : name) {
    text += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  const std::string_view view(text);
  if (!view.starts_with("RC_") && !view.starts_with("UC_") && !view.starts_with("UD_")) {
    text.insert(0, "RC_");
  }
  replace_all(text, "RDMA_", "");
  replace_all(text, "_WITH_IMMEDIATE", "_IMM");
  replace_all(text, "_WITH_INVALIDATE", "_INV");
  return text;
}

std::optional<uint8_t> parse_number(std::string_view text) {
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
    base = 16;
  }
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc() || end != text.data() + text.size() || value > 0xff) {
    return std::nullopt;
  }
  return static_cast<uint8_t>(value);
}

}  // namespace

std::optional<uint8_t> parse_opcode(std::string_view text) {
  if (text.empty()) return std::nullopt;
  if (std::isdigit(static_cast<unsigned char>(text[0]))) return parse_number(text);
  const std::string wanted = canonical_spelling(text);
  for (unsigned opcode = 0; opcode <= 0xff; ++opcode) {
    const char* name = packet::opcode_info(static_cast<uint8_t>(opcode)).name;
    if (name != nullptr && canonical_spelling(name) == wanted) {
      return static_cast<uint8_t>(opcode);
    }
  }
  return std::nullopt;
}

std::string opcode_text(uint8_t opcode) {
  const char* name = packet::opcode_info(opcode).name;
  return name != nullptr ? std::string(name) : std::to_string(opcode);
}

}  // namespace softverbs::fault
