// Where the progress thread sleeps while an application thread's poll
// stands (standing_poll.h). A poll that returned completions pauses the
// announcement until the program's next poll; a latency loop is back at
// its poll within moments. The thread must sleep beside that poll, as
// beside a running one, so that a producer gives the poller its moment
// (ShmMailbox::ring_doorbell) instead of ringing this thread, which then
// served the frame in the poller's place, the poller paused again, and so
// on for one round trip in four. Only once the poll lapses (a lease with
// no poll) is it withdrawn, and frames are this thread's again.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "emulator/engine/clock.h"
#include "emulator/engine/engine.h"
#include "emulator/engine/eventually.h"
#include "emulator/engine/standing_poll.h"
#include "emulator/transport/transport_test_fixture.h"

namespace softverbs {
namespace {

using namespace std::chrono_literals;

// A wire that never brings a frame.
class SilentWire final : public Wire {
 public:
  bool send(const WireAddress&, std::span<const uint8_t>) override { return false; }
  size_t poll(const std::function<void(std::span<const uint8_t>)>&, size_t) override { return 0; }
  bool may_have_input() const override { return false; }
  bool has_deferred() const override { return false; }
  WireCounters counters() const override { return {}; }
};

// Keeps the standing announcement and its pause as a mailbox does, and
// counts which sleep the progress thread takes: wait() is a sleep until a
// frame comes (a producer rings it), wait_while_application_polls() one
// beside the poll. Each sleep lasts a moment of real time.
class SleepCountingDoorbell final : public Doorbell {
 public:
  void wait(uint64_t) override {
    sleeps_until_frame.fetch_add(1);
    std::this_thread::sleep_for(20us);
  }
  void wait_while_application_polls(uint64_t) override {
    sleeps_beside_poll.fetch_add(1);
    std::this_thread::sleep_for(20us);
  }
  void wake() override {}
  void begin_standing_poll() override { standing = true; }
  bool end_standing_poll() override {
    if (standing.exchange(false)) withdrawals.fetch_add(1);
    return false;
  }
  void pause_application_poll(bool is_paused) override { paused = is_paused; }
  // As the mailbox counts pollers: a paused announcement is none.
  bool application_polling() const override { return standing && !paused; }

  std::atomic<bool> standing{false};
  std::atomic<bool> paused{false};
  std::atomic<int> sleeps_until_frame{0};
  std::atomic<int> sleeps_beside_poll{0};
  std::atomic<int> withdrawals{0};
};

TEST(ProgressThreadSleep, BesideAPausedPollUntilItLapsesThenUntilAFrame) {
  SleepCountingDoorbell doorbell;
  ManualClock clock;  // moved on by the test only: a lease lapses when it says
  Engine::Config config;
  config.wire = std::make_unique<SilentWire>();
  config.doorbell = &doorbell;
  config.qpns = std::make_unique<CountingQpns>();
  config.clock = &clock;
  config.progress_thread = true;
  Engine engine(std::move(config));

  // This thread polls a CQ and gets a completion: the poll stands, paused.
  engine.poll_for_application();
  ASSERT_TRUE(doorbell.standing) << "a poll without arming a CQ did not stand";
  engine.application_poll_found(true);
  ASSERT_TRUE(doorbell.paused);

  // A sleep that began before the pause may still end; from the first one
  // beside the paused poll on, every sleep is beside it.
  const int beside_at_pause = doorbell.sleeps_beside_poll;
  ASSERT_TRUE(eventually([&] { return doorbell.sleeps_beside_poll > beside_at_pause; }))
      << "the progress thread never slept beside the paused poll";
  const int until_frame = doorbell.sleeps_until_frame;
  const int beside = doorbell.sleeps_beside_poll;
  ASSERT_TRUE(eventually([&] { return doorbell.sleeps_beside_poll >= beside + 20; }));
  EXPECT_EQ(until_frame, doorbell.sleeps_until_frame)
      << "with the poll paused, the thread slept as if no one polled: producers ring it";
  EXPECT_EQ(0, doorbell.withdrawals) << "withdrawn within its lease";

  // A lease without a poll: the program went on to other work.
  clock.advance(3 * StandingPoll::kLeaseNs);
  ASSERT_TRUE(eventually([&] { return doorbell.withdrawals == 1; }))
      << "a paused poll that lapsed was never withdrawn";
  const int until_frame_after = doorbell.sleeps_until_frame;
  EXPECT_TRUE(eventually([&] { return doorbell.sleeps_until_frame > until_frame_after; }))
      << "once withdrawn, the thread did not sleep until a frame";
}

}  // namespace
}  // namespace softverbs
