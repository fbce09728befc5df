// A peer that breaks the ring protocol, for real: while two producer
// processes send checksummed frames to a consumer (this process), a third
// process rewrites the consumer's mailbox at random: the claim counter
// (a little or far ahead, behind, anywhere), sequence words, lengths, frame
// bytes and header fields. Then it leaves.
//
// What must hold: the consumer never hangs and never reads outside its slots
// (the ASan build runs this too); every frame it delivers is either, byte
// for byte, a frame that was sent, or fails the frame's own checksum; no
// send() blocks; and once the vandal is gone frames flow again: every frame
// sent from then on arrives, once, in order, intact.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "emulator/wire/shm_registry.h"
#include "emulator/wire/shm_wire.h"
#include "emulator/wire/wire_test_support.h"

namespace softverbs {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kDevice = 0;
constexpr uint32_t kProducers = 2;
constexpr uint32_t kConsumerSlots = kMinMailboxSlots;  // laps come fast: the vandal hits live slots
constexpr auto kVandalAtWork = std::chrono::seconds(3);
constexpr auto kSettleAfterVandal = std::chrono::seconds(1);
constexpr auto kGiveUpAfter = std::chrono::seconds(60);
constexpr uint64_t kStallLimitNs = 200'000'000;
constexpr uint64_t kCheckedFrames = 20'000;  // per producer, once the vandal is gone
constexpr uint64_t kCallBoundNs = 1'000'000'000;  // no send() or poll() may take this long
constexpr uint64_t kVandalSeed = 0x5eed'cafe'f00dull;

// ---- Frames: producer, phase, length, sequence, bytes, then a checksum.

constexpr size_t kFrameHeaderBytes = 12;
constexpr size_t kChecksumBytes = 8;
constexpr size_t kMinFrameBytes = kFrameHeaderBytes + kChecksumBytes;

uint64_t fnv1a(std::span<const uint8_t> bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (uint8_t byte : bytes) hash = (hash ^ byte) * 0x100000001b3ull;
  return hash;
}

void build_frame(uint8_t producer, uint8_t phase, uint64_t sequence, std::vector<uint8_t>& out) {
  const size_t size =
      testing::frame_size_for(sequence + producer, kMinFrameBytes, kShmMaxFrameBytes);
  out.resize(size);
  out[0] = producer;
  out[1] = phase;
  out[2] = static_cast<uint8_t>(size);
  out[3] = static_cast<uint8_t>(size >> 8);
  std::memcpy(&out[4], &sequence, sizeof(sequence));
  for (size_t i = kFrameHeaderBytes; i < size - kChecksumBytes; ++i) {
    out[i] = static_cast<uint8_t>(sequence * 7 + producer * 31 + phase + i * 131);
  }
  const uint64_t checksum = fnv1a(std::span(out).first(size - kChecksumBytes));
  std::memcpy(&out[size - kChecksumBytes], &checksum, sizeof(checksum));
}

struct FrameId {
  uint8_t producer = 0;
  uint8_t phase = 0;
  uint64_t sequence = 0;
};

// false when the frame fails its own integrity check (a garbled frame).
bool passes_checksum(std::span<const uint8_t> frame, FrameId& id) {
  if (frame.size() < kMinFrameBytes) return false;
  if ((frame[2] | frame[3] << 8) != static_cast<int>(frame.size())) return false;
  uint64_t checksum = 0;
  std::memcpy(&checksum, &frame[frame.size() - kChecksumBytes], sizeof(checksum));
  if (fnv1a(frame.first(frame.size() - kChecksumBytes)) != checksum) return false;
  id.producer = frame[0];
  id.phase = frame[1];
  std::memcpy(&id.sequence, &frame[4], sizeof(id.sequence));
  return true;
}

// Sends a prepared frame through send_with(): written in place in the ring.
class CopyWriter final : public FrameWriter {
 public:
  explicit CopyWriter(std::span<const uint8_t> frame) : frame_(frame) {}
  size_t write(std::span<uint8_t> room) override {
    if (frame_.size() > room.size()) return 0;
    std::memcpy(room.data(), frame_.data(), frame_.size());
    return frame_.size();
  }

 private:
  std::span<const uint8_t> frame_;
};

// ---- What the processes share: an anonymous shared page.

struct Shared {
  std::atomic<uint32_t> phase{1};  // 2: the vandal is gone, send the checked frames
  std::atomic<uint32_t> producers_ready{0};  // they have mapped the consumer's mailbox
  std::atomic<uint64_t> max_send_ns[kProducers];
  std::atomic<uint64_t> sent_while_vandalized[kProducers];
  std::atomic<uint64_t> vandal_acts{0};
};

struct Endpoint {
  std::unique_ptr<ShmRegistry> registry;
  std::unique_ptr<ShmWire> wire;
  uint32_t qpn = 0;

  bool open(uint32_t mailbox_slots) {
    Errno err = 0;
    registry = ShmRegistry::attach(err);
    if (registry) wire = ShmWire::create(*registry, mailbox_slots, err);
    return wire && registry->allocate_qpn(kDevice, qpn) == 0;
  }
  ~Endpoint() {
    wire.reset();
    registry.reset();
  }
};

uint64_t elapsed_ns(Clock::time_point since) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count());
}

void note_max(std::atomic<uint64_t>& slot, uint64_t value) {
  if (value > slot.load()) slot.store(value);
}

// One producer: frames of phase 1 while the vandal may be at work, then
// kCheckedFrames of phase 2, half of them written in place.
int run_producer(uint8_t producer, uint32_t consumer_qpn, Shared& shared) {
  Endpoint end;
  if (!end.open(kDefaultMailboxSlots)) return 1;
  ShmWire& wire = *end.wire;
  const WireAddress to{kDevice, consumer_qpn};
  const auto ignore = [](std::span<const uint8_t>) {};
  std::vector<uint8_t> frame;
  bool all_routed = true;
  auto timed_send = [&](bool in_place) {
    const auto started = Clock::now();
    CopyWriter writer(frame);
    all_routed &= in_place ? wire.send_with(to, frame.size(), writer) : wire.send(to, frame);
    note_max(shared.max_send_ns[producer], elapsed_ns(started));
  };
  // The first frame maps the consumer's mailbox, before its header may be
  // scribbled on (a producer opening it then would be refused: EPROTO).
  uint64_t sequence = 0;
  build_frame(producer, 1, sequence++, frame);
  timed_send(false);
  shared.producers_ready.fetch_add(1);
  while (shared.phase.load() == 1) {
    build_frame(producer, 1, sequence, frame);
    timed_send(sequence++ % 3 == 0);
    if (wire.has_deferred()) {
      wire.poll(ignore, 0);
      usleep(100);
    }
  }
  shared.sent_while_vandalized[producer].store(sequence);
  const uint64_t dropped_before = wire.counters().frames_dropped_peer_unusable;
  const auto deadline = Clock::now() + kGiveUpAfter / 2;
  for (sequence = 0; sequence < kCheckedFrames; ++sequence) {
    build_frame(producer, 2, sequence, frame);
    timed_send(sequence % 2 == 0);
    while (wire.has_deferred() && Clock::now() < deadline) {
      wire.poll(ignore, 0);
      std::this_thread::yield();
    }
  }
  if (!all_routed) return 2;
  if (wire.has_deferred()) return 3;
  if (wire.counters().frames_dropped_peer_unusable != dropped_before) return 4;
  return 0;
}

// One act of vandalism on the mailbox.
void vandalize(testing::RawMailbox& raw, std::mt19937_64& random) {
  const uint64_t slots = raw.slot_count();
  const uint64_t claimed = raw.enqueue_position();
  const uint64_t near = claimed + random() % (4 * slots) - 2 * slots;
  switch (random() % 10) {
    case 0:
    case 1:
      raw.set_enqueue_position(claimed + random() % (2 * slots + 1) - slots);
      break;
    case 2:
      switch (random() % 3) {
        case 0: raw.set_enqueue_position(random()); break;
        case 1: raw.set_enqueue_position(claimed + (uint64_t{1} << (random() % 64))); break;
        default: raw.set_enqueue_position(claimed - (uint64_t{1} << (random() % 64))); break;
      }
      break;
    case 3:  // looks published (or free) for some lap near the producers
      raw.set_sequence(near, near + random() % 2);
      break;
    case 4:
      raw.set_sequence(random() % slots, random() % 2 ? random() : near + random() % 5 - 2);
      break;
    case 5: {
      const uint32_t lengths[] = {0, 1, static_cast<uint32_t>(kShmMaxFrameBytes),
                                  static_cast<uint32_t>(kShmMaxFrameBytes + 1), 0xffffffffu,
                                  static_cast<uint32_t>(random())};
      raw.slot(random() % slots).length = lengths[random() % 6];
      break;
    }
    case 6:
    case 7: {
      MailboxSlot& slot = raw.slot(random() % slots);
      for (int i = 0; i < 4; ++i) slot.bytes[random() % kShmMaxFrameBytes] ^= 1 + random() % 255;
      break;
    }
    case 8: {
      MailboxHeader& header = raw.header();
      switch (random() % 5) {
        case 0: header.slot_count = static_cast<uint32_t>(random()); break;
        case 1: header.slot_bytes = static_cast<uint32_t>(random()); break;
        case 2: header.total_bytes = random(); break;
        case 3: header.version = static_cast<uint32_t>(random()); break;
        default: header.max_frame_bytes = static_cast<uint32_t>(random()); break;
      }
      break;
    }
    default: {
      MailboxHeader& header = raw.header();
      switch (random() % 3) {
        case 0: header.consumer_sleeping.store(random() % 2); break;
        case 1: header.pollers.store(static_cast<uint32_t>(random())); break;
        default: header.wake_requested.store(random() % 2); break;
      }
      break;
    }
  }
}

int run_vandal(const std::string& mailbox, Shared& shared) {
  testing::RawMailbox raw;
  if (!raw.open(mailbox)) return 1;
  std::mt19937_64 random(kVandalSeed);
  for (int i = 0; i < 30'000 && shared.producers_ready.load() < kProducers; ++i) usleep(1000);
  const auto until = Clock::now() + kVandalAtWork;
  while (Clock::now() < until) {
    vandalize(raw, random);
    shared.vandal_acts.fetch_add(1);
    // Bursts and pauses, so some scribbles meet traffic and some sit a while.
    if (random() % 4 == 0) usleep(static_cast<useconds_t>(random() % 200));
  }
  return 0;
}

// What the consumer saw.
struct Tally {
  uint64_t intact_while_vandalized = 0;
  uint64_t garbled = 0;
  uint64_t garbled_when_checked = 0;  // once checked frames flow: must stay 0
  uint64_t forged = 0;                // passed the checksum but was never sent: must stay 0
  uint64_t out_of_order = 0;          // checked frames not next in line: must stay 0
  uint64_t checked_next[kProducers] = {};
  uint64_t max_poll_ns = 0;

  bool all_checked_in() const {
    for (uint64_t next : checked_next) {
      if (next < kCheckedFrames) return false;
    }
    return true;
  }
};

void take(std::span<const uint8_t> shared_frame, bool checking, Tally& tally) {
  // The slot may still be written by the vandal: copy, then check the copy.
  const std::vector<uint8_t> frame(shared_frame.begin(), shared_frame.end());
  FrameId id;
  if (!passes_checksum(frame, id)) {
    ++tally.garbled;
    if (checking) ++tally.garbled_when_checked;
    return;
  }
  std::vector<uint8_t> sent;
  if (id.producer < kProducers && (id.phase == 1 || id.phase == 2)) {
    build_frame(id.producer, id.phase, id.sequence, sent);
  }
  if (sent != frame) {
    ++tally.forged;
    return;
  }
  if (id.phase == 1) {
    ++tally.intact_while_vandalized;
    return;
  }
  uint64_t& next = tally.checked_next[id.producer];
  if (id.sequence != next) ++tally.out_of_order;
  next = id.sequence + 1;
}

// The claim counter and every slot from the consumer's position on, for a
// failure message.
std::string describe_ring(const std::string& mailbox, uint64_t consumer_position) {
  testing::RawMailbox raw;
  if (!raw.open(mailbox)) return "(mailbox gone)";
  std::string text = "consumer at " + std::to_string(consumer_position) + ", claim counter " +
                     std::to_string(raw.enqueue_position()) + "\n";
  for (uint64_t position = consumer_position; position < consumer_position + raw.slot_count();
       ++position) {
    const MailboxSlot& slot = raw.slot(position);
    const uint64_t sequence = slot.biased_sequence + position % raw.slot_count();
    text += "  " + std::to_string(position) + ": sequence - position " +
            std::to_string(static_cast<int64_t>(sequence - position)) + ", length " +
            std::to_string(slot.length) + "\n";
  }
  return text;
}

class ShmRingVandalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    void* page = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(page, MAP_FAILED);
    shared_ = new (page) Shared{};
  }
  void TearDown() override {
    if (shared_ != nullptr) munmap(shared_, sizeof(Shared));
    testing::remove_segments_of_current_prefix();
  }

  testing::ScopedShmPrefix prefix_;
  testing::Watchdog watchdog_{600};
  Shared* shared_ = nullptr;
};

TEST_F(ShmRingVandalTest, AConsumerSurvivesAPeerScribblingOnItsRingAndRecovers) {
  Endpoint consumer;
  ASSERT_TRUE(consumer.open(kConsumerSlots));
  consumer.wire->set_stall_limit_ns(kStallLimitNs);
  const std::string mailbox = ShmRegistry::mailbox_name(consumer.registry->self());
  Shared& shared = *shared_;

  std::vector<pid_t> producers;
  for (uint8_t p = 0; p < kProducers; ++p) {
    producers.push_back(testing::fork_child(
        [&, p] { return run_producer(p, consumer.qpn, shared); }, 500));
  }
  const pid_t vandal = testing::fork_child([&] { return run_vandal(mailbox, shared); }, 500);

  Tally tally;
  bool vandal_gone = false;
  int vandal_status = -1;
  Clock::time_point vandal_left;
  const auto give_up = Clock::now() + kVandalAtWork + kGiveUpAfter;
  while (!tally.all_checked_in() && Clock::now() < give_up) {
    const bool checking = shared.phase.load() == 2;
    const auto started = Clock::now();
    const size_t served = consumer.wire->poll(
        [&](std::span<const uint8_t> frame) { take(frame, checking, tally); }, 64);
    tally.max_poll_ns = std::max(tally.max_poll_ns, elapsed_ns(started));
    if (served == 0) consumer.wire->wait(2'000'000);
    if (!vandal_gone) {
      int status = 0;
      if (waitpid(vandal, &status, WNOHANG) == vandal) {
        vandal_gone = true;
        vandal_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        vandal_left = Clock::now();
      }
    } else if (shared.phase.load() == 1 && Clock::now() - vandal_left > kSettleAfterVandal) {
      shared.phase.store(2);
    }
  }
  EXPECT_TRUE(tally.all_checked_in())
      << "frames stopped flowing after the vandal left; the ring now:\n"
      << describe_ring(mailbox, consumer.wire->inbox().consumer_position());
  if (!tally.all_checked_in()) {
    for (pid_t pid : producers) kill(pid, SIGKILL);
  }
  if (!vandal_gone) {
    kill(vandal, SIGKILL);
    vandal_status = testing::wait_child(vandal);
  }
  for (uint32_t p = 0; p < kProducers; ++p) {
    EXPECT_EQ(testing::wait_child(producers[p]), 0) << "producer " << p;
    EXPECT_LT(shared.max_send_ns[p].load(), kCallBoundNs) << "a send() of producer " << p;
  }
  EXPECT_EQ(vandal_status, 0);

  const WireCounters counters = consumer.wire->counters();
  std::printf("vandal acts %llu; frames sent while at work %llu + %llu; consumer took %llu intact,"
              " %llu garbled; ring protocol violations %llu; slowest poll %.1f ms\n",
              static_cast<unsigned long long>(shared.vandal_acts.load()),
              static_cast<unsigned long long>(shared.sent_while_vandalized[0].load()),
              static_cast<unsigned long long>(shared.sent_while_vandalized[1].load()),
              static_cast<unsigned long long>(tally.intact_while_vandalized),
              static_cast<unsigned long long>(tally.garbled),
              static_cast<unsigned long long>(counters.ring_protocol_violations),
              static_cast<double>(tally.max_poll_ns) / 1e6);
  EXPECT_GT(shared.vandal_acts.load(), 1000u);
  EXPECT_GT(counters.ring_protocol_violations, 0u);
  EXPECT_EQ(tally.forged, 0u) << "a frame passed its checksum but is not one that was sent";
  EXPECT_EQ(tally.out_of_order, 0u) << "frames sent after the vandal left came out of order";
  EXPECT_EQ(tally.garbled_when_checked, 0u);
  EXPECT_LT(tally.max_poll_ns, kCallBoundNs);
}

}  // namespace
}  // namespace softverbs
