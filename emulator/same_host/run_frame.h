// A run: consecutive packets of one SEND or WRITE message between two
// processes of one host, carried as one frame that names where the payload
// lies in the sender's memory instead of carrying it. The receiver, after
// the checks it would make for each packet, pulls the bytes with one
// process_vm_readv (Linux cross-memory attach) straight into their place:
// one copy for the whole run instead of four per packet.
//
// The frame holds the real IBA headers of the run's first and last packets
// (each an IB frame with an empty payload and its own ICRC), so every
// protocol decision reads real header fields: the first packet's PSN and
// RETH, the last packet's opcode, ImmDt, solicited and AckReq bits. The run
// stands for `packets` PSNs, first.psn .. last.psn, and `bytes` of payload
// cut at the path MTU exactly as the packets would be.
//
// Layout (host byte order; a private format of the shared-memory wire):
//   0  marker 0xff (an LRH with LVer 15: no IB decoder takes it for a packet)
//   1  version
//   2  piece count (u16); 0: the payload is in its place already (a WRITE
//      whose bytes the sender placed itself: direct_execution.h), nothing
//      to pull
//   4  sender pid (u32)
//   8  packets (u32)
//   12 first frame bytes (u16), 14 last frame bytes (u16)
//   16 payload bytes (u64)
//   24 first frame, last frame, pieces (u64 address, u64 length each)
//   ...CRC-32 of everything before it
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "emulator/attributes.h"
#include "emulator/packet/codec.h"

namespace softverbs {

inline constexpr uint8_t kRunFrameMarker = 0xff;

// A piece of the payload in the sender's address space.
struct RunPiece {
  uint64_t addr = 0;
  uint64_t length = 0;
};

struct RunFrame {
  uint32_t sender_pid = 0;
  uint32_t packets = 0;
  uint64_t bytes = 0;
  packet::Headers first;
  packet::Headers last;
  std::array<RunPiece, kMaxSge> pieces{};
  uint32_t piece_count = 0;
  // The sender placed the bytes of this WRITE in the target's MR before
  // sending the run (after the checks a direct WRITE makes): the
  // responder makes its checks and takes the run's PSNs, receive WQE and
  // completion as for any run, and copies nothing. No pieces.
  bool placed = false;
};

// The payload of a request: the bytes of one packet at hand, or a run whose
// bytes are still in the sender's memory.
struct Payload {
  std::span<const uint8_t> bytes;
  const RunFrame* run = nullptr;
  uint64_t size() const { return run ? run->bytes : bytes.size(); }
};

inline bool is_run_frame(std::span<const uint8_t> frame) {
  return !frame.empty() && frame[0] == kRunFrameMarker;
}

// Writes the frame; 0 when it does not fit `out` or a header does not encode.
size_t encode_run(const RunFrame& run, std::span<uint8_t> out);

// Parses and checks a run frame: its CRC, both embedded packets (ICRC
// included), that they belong together (one destination QP, PSNs `packets`
// apart, first and last positions that fit), and that the pieces add up to
// `bytes` (or that a run without pieces is a WRITE's). Never reads outside `in`. false on anything malformed.
bool decode_run(std::span<const uint8_t> in, RunFrame& out);

// Copies the run's payload from the sender's memory into `local` (iovec-like
// pieces of this process). Returns 0 or the errno of process_vm_readv (EPERM
// where the kernel refuses cross-memory attach, ESRCH, EFAULT), or EIO when
// fewer bytes came than asked.
int pull_run(const RunFrame& run, std::span<const RunPiece> local);

}  // namespace softverbs
