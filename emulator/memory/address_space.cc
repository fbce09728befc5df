#include "emulator/memory/address_space.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace softverbs {
namespace {

// The whole of /proc/self/maps: read at once, since the kernel builds each
// read from the current mappings and a line must not be split across two
// views of them.
std::string read_maps() {
  std::string text;
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char chunk[16384];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

using Mapping = MappedRange;

// One line: "begin-end perms offset dev inode path".
bool parse_line(const char* line, Mapping& out) {
  char* rest = nullptr;
  out.begin = std::strtoull(line, &rest, 16);
  if (*rest != '-') return false;
  out.end = std::strtoull(rest + 1, &rest, 16);
  if (*rest != ' ' || rest[1] == '\0' || rest[2] == '\0' || rest[3] == '\0' ||
      rest[4] == '\0')
    return false;
  out.readable = rest[1] == 'r';
  out.writable = rest[2] == 'w';
  out.shared = rest[4] == 's';
  out.offset = std::strtoull(rest + 5, &rest, 16);
  while (*rest == ' ') ++rest;
  while (*rest != ' ' && *rest != '\0') ++rest;  // the device
  out.inode = std::strtoull(rest, &rest, 10);
  while (*rest == ' ') ++rest;
  out.path = rest;
  return out.end > out.begin;
}

// Calls `each` with every mapping that overlaps [addr, end), in address
// order, until it returns false.
template <typename Each>
void for_each_mapping(uint64_t addr, uint64_t end, Each&& each) {
  const std::string maps = read_maps();
  for (size_t pos = 0; pos < maps.size();) {
    const size_t eol = maps.find('\n', pos);
    const std::string line = maps.substr(pos, eol == std::string::npos ? eol : eol - pos);
    pos = eol == std::string::npos ? maps.size() : eol + 1;
    Mapping m;
    if (!parse_line(line.c_str(), m) || m.end <= addr) continue;
    if (m.begin >= end || !each(m)) return;
  }
}

}  // namespace

bool range_is_mapped(uint64_t addr, uint64_t length, bool writable) {
  if (length == 0) return true;
  if (addr + length < addr) return false;
  const uint64_t end = addr + length;
  uint64_t covered = addr;  // every byte below it is mapped as asked
  bool usable = true;
  for_each_mapping(addr, end, [&](const Mapping& m) {
    // A hole, or a mapping without the access asked for.
    usable = m.begin <= covered && m.readable && (!writable || m.writable);
    covered = m.end;
    return usable && covered < end;
  });
  return usable && covered >= end;
}

std::vector<MappedRange> mappings_over(uint64_t addr, uint64_t length) {
  std::vector<MappedRange> found;
  if (length == 0 || addr + length < addr) return found;
  for_each_mapping(addr, addr + length, [&](const Mapping& m) {
    found.push_back(m);
    return true;
  });
  return found;
}

}  // namespace softverbs
