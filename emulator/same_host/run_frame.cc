#include "emulator/same_host/run_frame.h"

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "emulator/memory/page_move.h"
#include "emulator/packet/crc32.h"

namespace softverbs {
namespace {

constexpr uint8_t kRunFrameVersion = 1;
constexpr size_t kFixedBytes = 24;
constexpr size_t kPieceBytes = 16;
constexpr size_t kCrcBytes = 4;

template <typename T>
void put(uint8_t* at, T value) {
  std::memcpy(at, &value, sizeof value);
}

template <typename T>
T get(const uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

bool starts_message(packet::Position p) {
  return p == packet::Position::kFirst || p == packet::Position::kOnly;
}
bool ends_message(packet::Position p) {
  return p == packet::Position::kLast || p == packet::Position::kOnly;
}

// The two packets can be the ends of one run of a SEND or WRITE message.
bool ends_fit(const RunFrame& run) {
  const packet::OpcodeInfo& a = packet::opcode_info(static_cast<uint8_t>(run.first.bth.opcode));
  const packet::OpcodeInfo& b = packet::opcode_info(static_cast<uint8_t>(run.last.bth.opcode));
  if (!a.name || !b.name || !a.is_request || !b.is_request) return false;
  if (a.operation != b.operation || a.transport != b.transport) return false;
  if (a.operation != packet::Operation::kSend && a.operation != packet::Operation::kWrite)
    return false;
  if (run.first.bth.dest_qp != run.last.bth.dest_qp) return false;
  if (packet::psn_add(run.first.bth.psn, run.packets - 1) != run.last.bth.psn) return false;
  if (run.packets == 1) return run.first == run.last;
  // Only the first may start the message and only the last may end it.
  return !ends_message(a.position) && !starts_message(b.position);
}

}  // namespace

size_t encode_run(const RunFrame& run, std::span<uint8_t> out) {
  const uint32_t piece_count = run.placed ? 0 : run.piece_count;
  if (piece_count > run.pieces.size() || out.size() < kFixedBytes) return 0;
  uint8_t* const base = out.data();
  std::span<uint8_t> rest = out.subspan(kFixedBytes);
  const size_t first_bytes = packet::encode_ib(run.first, {}, rest);
  if (first_bytes == 0) return 0;
  rest = rest.subspan(first_bytes);
  const size_t last_bytes = packet::encode_ib(run.last, {}, rest);
  if (last_bytes == 0) return 0;
  rest = rest.subspan(last_bytes);
  const size_t pieces_bytes = piece_count * kPieceBytes;
  if (rest.size() < pieces_bytes + kCrcBytes) return 0;
  base[0] = kRunFrameMarker;
  base[1] = kRunFrameVersion;
  put<uint16_t>(base + 2, static_cast<uint16_t>(piece_count));
  put<uint32_t>(base + 4, run.sender_pid);
  put<uint32_t>(base + 8, run.packets);
  put<uint16_t>(base + 12, static_cast<uint16_t>(first_bytes));
  put<uint16_t>(base + 14, static_cast<uint16_t>(last_bytes));
  put<uint64_t>(base + 16, run.bytes);
  uint8_t* p = rest.data();
  for (uint32_t i = 0; i < piece_count; ++i, p += kPieceBytes) {
    put<uint64_t>(p, run.pieces[i].addr);
    put<uint64_t>(p + 8, run.pieces[i].length);
  }
  const size_t covered = static_cast<size_t>(p - base);
  put<uint32_t>(p, packet::crc32(std::span<const uint8_t>(base, covered)));
  return covered + kCrcBytes;
}

bool decode_run(std::span<const uint8_t> in, RunFrame& out) {
  if (in.size() < kFixedBytes + kCrcBytes) return false;
  const uint8_t* const base = in.data();
  if (base[0] != kRunFrameMarker || base[1] != kRunFrameVersion) return false;
  const size_t covered = in.size() - kCrcBytes;
  if (get<uint32_t>(base + covered) != packet::crc32(in.first(covered))) return false;
  out.piece_count = get<uint16_t>(base + 2);
  out.sender_pid = get<uint32_t>(base + 4);
  out.packets = get<uint32_t>(base + 8);
  const size_t first_bytes = get<uint16_t>(base + 12);
  const size_t last_bytes = get<uint16_t>(base + 14);
  out.bytes = get<uint64_t>(base + 16);
  if (out.piece_count > out.pieces.size()) return false;
  out.placed = out.piece_count == 0;
  if (out.packets == 0 || out.packets > packet::kPsnMask / 2) return false;
  if (kFixedBytes + first_bytes + last_bytes + out.piece_count * kPieceBytes != covered)
    return false;
  packet::DecodedPacket first, last;
  if (packet::decode_ib(in.subspan(kFixedBytes, first_bytes), first) != packet::DecodeError::kNone ||
      packet::decode_ib(in.subspan(kFixedBytes + first_bytes, last_bytes), last) !=
          packet::DecodeError::kNone ||
      !first.payload.empty() || !last.payload.empty())
    return false;
  out.first = first.headers;
  out.last = last.headers;
  if (!ends_fit(out)) return false;
  // Only a WRITE's bytes can be placed by the sender: a SEND's receive
  // buffers are the receiver's to choose.
  if (out.placed)
    return packet::opcode_info(static_cast<uint8_t>(out.first.bth.opcode)).operation ==
           packet::Operation::kWrite;
  const uint8_t* p = base + kFixedBytes + first_bytes + last_bytes;
  uint64_t total = 0;
  for (uint32_t i = 0; i < out.piece_count; ++i, p += kPieceBytes) {
    out.pieces[i] = RunPiece{get<uint64_t>(p), get<uint64_t>(p + 8)};
    if (out.pieces[i].length > out.bytes - total) return false;  // no overflow
    total += out.pieces[i].length;
  }
  return total == out.bytes;
}

int pull_run(const RunFrame& run, std::span<const RunPiece> local) {
  iovec remote_iov[kMaxSge];
  iovec local_iov[kMaxSge];
  if (local.size() > kMaxSge) return EINVAL;
  uint64_t wanted = 0;
  for (uint32_t i = 0; i < run.piece_count; ++i)
    remote_iov[i] = iovec{reinterpret_cast<void*>(run.pieces[i].addr), run.pieces[i].length};
  for (size_t i = 0; i < local.size(); ++i) {
    local_iov[i] = iovec{reinterpret_cast<void*>(local[i].addr), local[i].length};
    wanted += local[i].length;
  }
  if (wanted != run.bytes) return EINVAL;
  if (wanted == 0) return 0;
  for (;;) {
    const uint32_t moves = page_move::moves_begun();
    const ssize_t got = process_vm_readv(static_cast<pid_t>(run.sender_pid), local_iov,
                                         local.size(), remote_iov, run.piece_count, 0);
    if (got >= 0 && static_cast<uint64_t>(got) == wanted) return 0;
    const int err = got < 0 ? errno : EIO;
    // Pages of this process moving under the pull (page_move.h) turned
    // read-only for the time: it is made again into the new ones.
    const bool moved = std::any_of(local.begin(), local.end(), [&](const RunPiece& p) {
      return page_move::moved_since(moves, p.addr, p.length);
    });
    if (!moved) return err;
  }
}

}  // namespace softverbs
