// An application thread blocked for completion events serves the intake
// itself when a frame rings it (Engine::wait_serving_intake). When another
// application thread is serving right then, the frame that rang is still in
// the ring: the woken thread must wait for that thread, not go back to a
// sleep that the same frame ends at once. Returning early made every
// blocked thread of a process spin on its ring while another one served,
// taking a core from it: T threads blocked in ibv_get_cq_event moved less
// than one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "emulator/engine/engine.h"
#include "emulator/transport/transport_test_fixture.h"
#include "emulator/wire/futex.h"

namespace softverbs {
namespace {

using namespace std::chrono_literals;

// A wire whose poll() blocks its first caller until released, standing for
// an application thread in the middle of serving a frame; later polls
// return at once. The test counts polls, not frames.
class GatedWire final : public Wire {
 public:
  bool send(const WireAddress&, std::span<const uint8_t>) override { return false; }
  size_t poll(const std::function<void(std::span<const uint8_t>)>&, size_t) override {
    std::unique_lock lock(mutex_);
    ++polls_;
    changed_.notify_all();
    if (polls_ == 1) changed_.wait(lock, [this] { return released_; });
    return 0;
  }
  bool has_deferred() const override { return false; }
  WireCounters counters() const override { return {}; }

  void wait_for_polls(int count) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return polls_ >= count; });
  }
  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }
  int polls() {
    std::lock_guard lock(mutex_);
    return polls_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int polls_ = 0;
  bool released_ = false;
};

// A doorbell that rings an application sleeper at once, as a mailbox does
// when a frame already waits in its ring.
class RingingDoorbell final : public Doorbell {
 public:
  void wait(uint64_t) override {}
  void wake() override {}
  std::atomic<uint32_t>* begin_application_sleep() override {
    word_.store(0);  // rung before the sleep begins
    return &word_;
  }
  bool end_application_sleep() override { return true; }

 private:
  std::atomic<uint32_t> word_{0};
};

TEST(EventWaiter, RungWhileAnotherThreadServesItWaitsForThatThreadThenServes) {
  if (!futex_wait_either_available()) GTEST_SKIP() << "no futex_waitv on this kernel";
  RingingDoorbell doorbell;
  Engine::Config config;
  auto wire = std::make_unique<GatedWire>();
  GatedWire& gated = *wire;
  config.wire = std::move(wire);
  config.doorbell = &doorbell;
  config.qpns = std::make_unique<CountingQpns>();
  config.progress_thread = false;
  Engine engine(std::move(config));

  // Another application thread polls its CQ and is in the middle of serving.
  std::thread server([&] { engine.progress_for_application(); });
  gated.wait_for_polls(1);

  // This thread's event has not come: it sleeps serving the intake, and a
  // frame rings it at once.
  std::atomic<uint32_t> event_word{7};
  std::future<Errno> waited =
      std::async(std::launch::async, [&] { return engine.wait_serving_intake(event_word, 7); });
  EXPECT_EQ(std::future_status::timeout, waited.wait_for(100ms))
      << "the rung thread went on while another thread served the frame that rang it";
  EXPECT_EQ(1, gated.polls()) << "it polled the ring beside the thread serving it";

  gated.release();
  server.join();
  ASSERT_EQ(std::future_status::ready, waited.wait_for(10s));
  EXPECT_EQ(0, waited.get());
  EXPECT_EQ(2, gated.polls()) << "once the other thread was done, the rung thread served";
  EXPECT_EQ(1u, engine.counters().intake_by_event_waiter);
}

}  // namespace
}  // namespace softverbs
