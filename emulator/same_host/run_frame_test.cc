// The run frame's codec: what encodes decodes to the same run, and nothing
// malformed is taken for a run.
#include "emulator/same_host/run_frame.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "emulator/packet/crc32.h"

namespace softverbs {
namespace {

using packet::Opcode;

RunFrame sample_run(uint32_t packets = 5) {
  RunFrame run;
  run.sender_pid = 4242;
  run.packets = packets;
  run.bytes = uint64_t(packets - 1) * 1024 + 100;
  run.first.lrh.dlid = 1;
  run.first.bth.opcode = Opcode::kRcWriteFirst;
  run.first.bth.dest_qp = 0x123;
  run.first.bth.psn = 0xfffffe;  // the run's PSNs wrap
  run.first.reth = {0x10000, 0x77, static_cast<uint32_t>(run.bytes)};
  run.last = run.first;
  run.last.bth.opcode = Opcode::kRcWriteLastImm;
  run.last.bth.psn = packet::psn_add(run.first.bth.psn, packets - 1);
  run.last.bth.ack_req = true;
  run.last.imm_data = 0x01020304;
  run.last.reth = {};
  run.piece_count = 2;
  run.pieces[0] = {0x7000, 1000};
  run.pieces[1] = {0x9000, run.bytes - 1000};
  return run;
}

std::vector<uint8_t> encoded(const RunFrame& run) {
  std::vector<uint8_t> frame(1024);
  frame.resize(encode_run(run, frame));
  return frame;
}

// Recomputes the trailing CRC, so a test reaches the checks behind it.
void reseal(std::vector<uint8_t>& frame) {
  const size_t covered = frame.size() - 4;
  const uint32_t crc = packet::crc32(std::span<const uint8_t>(frame.data(), covered));
  std::memcpy(frame.data() + covered, &crc, 4);
}

TEST(RunFrame, EncodedRunDecodesToTheSameRun) {
  const RunFrame run = sample_run();
  const std::vector<uint8_t> frame = encoded(run);
  ASSERT_FALSE(frame.empty());
  EXPECT_TRUE(is_run_frame(frame));
  RunFrame back;
  ASSERT_TRUE(decode_run(frame, back));
  EXPECT_EQ(back.sender_pid, run.sender_pid);
  EXPECT_EQ(back.packets, run.packets);
  EXPECT_EQ(back.bytes, run.bytes);
  EXPECT_EQ(back.first.bth.psn, run.first.bth.psn);
  EXPECT_EQ(back.first.bth.opcode, run.first.bth.opcode);
  EXPECT_EQ(back.first.reth, run.first.reth);
  EXPECT_EQ(back.last.bth.psn, run.last.bth.psn);
  EXPECT_EQ(back.last.imm_data, run.last.imm_data);
  ASSERT_EQ(back.piece_count, 2u);
  EXPECT_EQ(back.pieces[1].length, run.pieces[1].length);
}

TEST(RunFrame, AnIbPacketIsNotARun) {
  packet::Headers h;
  h.bth.opcode = Opcode::kRcSendOnly;
  std::array<uint8_t, 64> frame{};
  ASSERT_GT(packet::encode_ib(h, {}, frame), 0u);
  EXPECT_FALSE(is_run_frame(frame));
}

TEST(RunFrame, EveryTruncationIsRefused) {
  const std::vector<uint8_t> frame = encoded(sample_run());
  for (size_t size = 0; size < frame.size(); ++size) {
    RunFrame out;
    EXPECT_FALSE(decode_run(std::span(frame.data(), size), out)) << size;
  }
}

TEST(RunFrame, EveryFlippedBitIsRefused) {
  const std::vector<uint8_t> frame = encoded(sample_run());
  for (size_t bit = 0; bit < frame.size() * 8; ++bit) {
    std::vector<uint8_t> bad = frame;
    bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    RunFrame out;
    EXPECT_FALSE(decode_run(bad, out)) << "bit " << bit;
  }
}

// With a valid CRC, the contents must still make sense.
TEST(RunFrame, InconsistentRunsAreRefused) {
  auto refused = [](RunFrame run) {
    std::vector<uint8_t> frame = encoded(run);
    if (frame.empty()) return true;  // did not even encode
    RunFrame out;
    return !decode_run(frame, out);
  };
  RunFrame psn_gap = sample_run();
  psn_gap.last.bth.psn = packet::psn_add(psn_gap.last.bth.psn, 1);
  EXPECT_TRUE(refused(psn_gap));
  RunFrame other_qp = sample_run();
  other_qp.last.bth.dest_qp = 0x124;
  EXPECT_TRUE(refused(other_qp));
  RunFrame pieces_short = sample_run();
  pieces_short.pieces[1].length -= 1;
  EXPECT_TRUE(refused(pieces_short));
  RunFrame read = sample_run();
  read.first.bth.opcode = read.last.bth.opcode = Opcode::kRcReadRequest;
  EXPECT_TRUE(refused(read));
  RunFrame ends_early = sample_run();
  ends_early.first.bth.opcode = Opcode::kRcWriteOnly;
  EXPECT_TRUE(refused(ends_early));
  RunFrame mixed = sample_run();
  mixed.last.bth.opcode = Opcode::kRcSendLast;
  EXPECT_TRUE(refused(mixed));
  // A SEND's bytes cannot have been placed: its buffers are the receiver's.
  RunFrame placed_send = sample_run();
  placed_send.first.bth.opcode = Opcode::kRcSendFirst;
  placed_send.last.bth.opcode = Opcode::kRcSendLast;
  placed_send.placed = true;
  EXPECT_TRUE(refused(placed_send));
}

// A WRITE whose bytes its sender placed: no pieces, and the receiver
// learns it has nothing to pull.
TEST(RunFrame, APlacedWriteHasNoPiecesAndSaysSo) {
  RunFrame run = sample_run();
  run.placed = true;
  std::vector<uint8_t> frame = encoded(run);
  ASSERT_FALSE(frame.empty());
  EXPECT_LT(frame.size(), encoded(sample_run()).size());
  RunFrame out;
  ASSERT_TRUE(decode_run(frame, out));
  EXPECT_TRUE(out.placed);
  EXPECT_EQ(out.piece_count, 0u);
  EXPECT_EQ(out.bytes, run.bytes);
  EXPECT_EQ(out.last.bth.opcode, Opcode::kRcWriteLastImm);
  RunFrame pulled;
  ASSERT_TRUE(decode_run(encoded(sample_run()), pulled));
  EXPECT_FALSE(pulled.placed);
}

TEST(RunFrame, PieceLengthsThatOverflowAreRefused) {
  std::vector<uint8_t> frame = encoded(sample_run());
  // Piece 1's length is the last 8 bytes before the CRC: make the sum wrap.
  const uint64_t huge = ~uint64_t{0} - 500;
  std::memcpy(frame.data() + frame.size() - 4 - 8, &huge, 8);
  reseal(frame);
  RunFrame out;
  EXPECT_FALSE(decode_run(frame, out));
}

// A pull copies from the sender's address space (here our own).
TEST(RunFrame, PullCopiesEveryPieceInOrder) {
  std::vector<uint8_t> source(5000), dest(5000, 0);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint8_t>(i * 13);
  RunFrame run;
  run.sender_pid = static_cast<uint32_t>(getpid());
  run.bytes = 5000;
  run.piece_count = 2;
  run.pieces[0] = {reinterpret_cast<uint64_t>(source.data()), 3000};
  run.pieces[1] = {reinterpret_cast<uint64_t>(source.data()) + 3000, 2000};
  const RunPiece local[2] = {{reinterpret_cast<uint64_t>(dest.data()), 10},
                             {reinterpret_cast<uint64_t>(dest.data()) + 10, 4990}};
  ASSERT_EQ(pull_run(run, local), 0);
  EXPECT_EQ(source, dest);
  const RunPiece too_short[1] = {{reinterpret_cast<uint64_t>(dest.data()), 4999}};
  EXPECT_EQ(pull_run(run, too_short), EINVAL);
}

}  // namespace
}  // namespace softverbs
