// libFuzzer target for the UDP wire's receive path: a datagram as a hostile
// host could send it, with the addresses the socket reported, through the
// RoCEv2 check and conversion (roce_v2_to_ib) and the IB decoder. No input
// may read out of bounds or hit undefined behaviour; a datagram accepted
// and decoded must convert back to the very same datagram.
//
// Input: 16 bytes source GID, 16 bytes destination GID, 2 bytes source
// port, then the UDP payload. Random payloads almost never carry a right
// ICRC, so the mutator recomputes it after most mutations: the fuzzer then
// spends its time in the conversion and the decoder.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "emulator/packet/codec.h"
#include "emulator/packet/roce_v2.h"

namespace {

namespace packet = softverbs::packet;

constexpr size_t kAddressingBytes = 34;
constexpr size_t kLargestPayload = packet::kMaxFrameBytes;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "roce_receive_fuzzer: %s\n", what);
  std::abort();
}

packet::RoceV2Addressing addressing_of(const uint8_t* data) {
  packet::RoceV2Addressing a;
  std::memcpy(a.source.data(), data, 16);
  std::memcpy(a.destination.data(), data + 16, 16);
  a.source_port = static_cast<uint16_t>(data[32] << 8 | data[33]);
  return a;
}

// Gives the payload the ICRC its addressing calls for.
void repair_icrc(uint8_t* data, size_t size) {
  if (size < kAddressingBytes + packet::kBthBytes + packet::kIcrcBytes) return;
  const packet::RoceV2Addressing a = addressing_of(data);
  const std::span<const uint8_t> payload(data + kAddressingBytes, size - kAddressingBytes);
  std::vector<uint8_t> out(payload.size() + packet::kRoceV2MaxHeaderBytes);
  const std::span<const uint8_t> fixed = packet::transport_to_roce_v2(payload, 0, a, out);
  if (fixed.size() == payload.size())
    std::memcpy(data + kAddressingBytes, fixed.data(), fixed.size());
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if (seed % 8 != 0) repair_icrc(data, size);  // one in eight keeps a random ICRC
  return size;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kAddressingBytes || size - kAddressingBytes > kLargestPayload) return 0;
  const packet::RoceV2Addressing a = addressing_of(data);
  const std::span<const uint8_t> payload(data + kAddressingBytes, size - kAddressingBytes);
  std::vector<uint8_t> out(payload.size() + packet::kRoceV2MaxHeaderBytes);
  std::span<const uint8_t> frame;
  if (packet::roce_v2_to_ib(a, payload, out, frame) != packet::DecodeError::kNone) return 0;
  packet::DecodedPacket decoded;
  if (packet::decode_ib(frame, decoded) != packet::DecodeError::kNone) return 0;

  // What was accepted goes back out as the same datagram (a numbered IPv4
  // sender's ICRC aside: it is re-sent with identification 0).
  packet::RoceV2Addressing back;
  back.source_port = a.source_port;
  std::vector<uint8_t> again(frame.size() + packet::kRoceV2MaxHeaderBytes);
  const std::span<const uint8_t> resent = packet::ib_to_roce_v2(frame, back, again);
  if (resent.size() != payload.size()) fail("an accepted datagram changed length on the way back");
  if (std::memcmp(resent.data(), payload.data(), payload.size() - packet::kIcrcBytes) != 0)
    fail("an accepted datagram changed on the way back");
  if (back.source != a.source || back.destination != a.destination)
    fail("an accepted datagram's addresses changed on the way back");
  return 0;
}
