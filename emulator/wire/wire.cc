#include "emulator/wire/wire.h"

#include <new>
#include <vector>

namespace softverbs {

bool Wire::send_with(const WireAddress& dst, size_t max_bytes, FrameWriter& writer) {
  // One buffer per thread, grown to the largest frame asked for: no
  // allocation per frame. A writer that sends from inside write() (it must
  // not) would find it in use and get a buffer of its own.
  thread_local std::vector<uint8_t> buffer;
  thread_local bool buffer_in_use = false;
  std::vector<uint8_t> nested;
  std::vector<uint8_t>& room = buffer_in_use ? nested : buffer;
  try {
    if (room.size() < max_bytes) room.resize(max_bytes);
  } catch (const std::bad_alloc&) {
    return false;
  }
  const bool outer = &room == &buffer;
  if (outer) buffer_in_use = true;
  const size_t written = writer.write(std::span<uint8_t>(room.data(), max_bytes));
  bool sent = false;
  if (written != 0 && written <= max_bytes) {
    sent = send(dst, std::span<const uint8_t>(room.data(), written));
  }
  if (outer) buffer_in_use = false;
  return sent;
}

}  // namespace softverbs
