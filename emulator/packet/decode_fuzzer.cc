// libFuzzer target for the IB frame decoder. Any input must decode without
// reading out of bounds (ASan) or undefined behaviour (UBSan); an input that
// decodes must re-encode, and the re-encoded frame must decode to the same
// headers and payload.
//
// Random bytes almost never carry a matching ICRC and PktLen, so a custom
// mutator repairs those after most mutations: the fuzzer then spends its
// time in the header parsing and the round trip, not only at the ICRC check.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>

#include "emulator/packet/codec.h"
#include "emulator/packet/icrc.h"

namespace {

namespace packet = softverbs::packet;

// Any frame the 11-bit PktLen can describe.
constexpr size_t kLargestFrame = 0x7ff * 4;
constexpr uint8_t kLnhGlobal = 3;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "packet_decode_fuzzer: %s\n", what);
  std::abort();
}

// Makes the LRH PktLen, the GRH PayLen (when LNH says there is one) and
// the ICRC agree with the frame's length and content.
size_t repair_lengths_and_icrc(uint8_t* data, size_t size) {
  size &= ~size_t{3};
  if (size < packet::kLrhBytes + packet::kIcrcBytes) return size;
  const size_t words = size / 4;
  data[4] = static_cast<uint8_t>((data[4] & 0xf8) | ((words >> 8) & 0x7));
  data[5] = static_cast<uint8_t>(words);
  const size_t routing = packet::kLrhBytes + packet::kGrhBytes;
  if ((data[1] & 0x3) == kLnhGlobal && size >= routing + packet::kIcrcBytes) {
    const size_t pay_len = size - routing;
    data[packet::kLrhBytes + 4] = static_cast<uint8_t>(pay_len >> 8);
    data[packet::kLrhBytes + 5] = static_cast<uint8_t>(pay_len);
  }
  const size_t covered = size - packet::kIcrcBytes;
  packet::store_icrc(data + covered,
                     packet::icrc_ib(std::span(data, covered)));
  return size;
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size,
                                          size_t max_size, unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  // One mutation in eight keeps its raw bytes, to exercise the checks the
  // repair would otherwise always satisfy.
  if (std::minstd_rand(seed)() % 8 == 0) return size;
  return repair_lengths_and_icrc(data, size);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  packet::DecodedPacket first;
  if (packet::decode_ib(std::span(data, size), first) !=
      packet::DecodeError::kNone) {
    return 0;
  }

  static uint8_t frame[kLargestFrame];
  const size_t frame_bytes =
      packet::encode_ib(first.headers, first.payload, frame);
  if (frame_bytes == 0) fail("a decoded packet failed to re-encode");
  if (frame_bytes != size) fail("the re-encoded frame has another size");

  packet::DecodedPacket second;
  if (packet::decode_ib(std::span(frame, frame_bytes), second) !=
      packet::DecodeError::kNone) {
    fail("the re-encoded frame does not decode");
  }
  if (!(second.headers == first.headers)) fail("the headers changed");
  if (second.payload.size() != first.payload.size() ||
      std::memcmp(second.payload.data(), first.payload.data(),
                  first.payload.size()) != 0) {
    fail("the payload changed");
  }
  return 0;
}
