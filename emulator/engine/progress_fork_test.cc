// fork() beside a running progress thread: the thread is parked at a safe
// point while the process forks (so the child inherits no lock it held,
// the allocator's included) and goes on afterwards.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "emulator/engine/eventually.h"
#include "emulator/transport/transport_test_fixture.h"

namespace softverbs {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Engine> engine_with_progress_thread() {
  Engine::Config config;
  auto wire = std::make_unique<LoopbackWire>();
  config.doorbell = wire.get();
  config.wire = std::move(wire);
  config.qpns = std::make_unique<CountingQpns>();
  config.progress_thread = true;
  return std::make_unique<Engine>(std::move(config));
}

TEST(ProgressThreadAtFork, HoldingParksTheThreadAndReleasingResumesIt) {
  std::unique_ptr<Engine> engine = engine_with_progress_thread();
  EXPECT_FALSE(engine->progress_parked_for_fork());
  engine->hold_progress_for_fork();
  EXPECT_TRUE(engine->progress_parked_for_fork()) << "held, but not parked";
  std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(engine->progress_parked_for_fork()) << "left its park while held";
  engine->release_progress_after_fork();
  EXPECT_TRUE(eventually([&] { return !engine->progress_parked_for_fork(); }))
      << "still parked after the release";
  // Held and released again, then stopped: nothing is left waiting.
  engine->hold_progress_for_fork();
  engine->release_progress_after_fork();
  engine.reset();
}

}  // namespace
}  // namespace softverbs
