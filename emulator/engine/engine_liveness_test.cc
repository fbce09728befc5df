// A process is alive to its peers (liveness_page.h) from the moment its
// engine exists: a peer's first WRITE into its shared MR pages must not
// find the page not yet held (the progress thread not yet run, as on a
// busy host) and go by system call, or for an atomic go as packets for
// that MR from then on.
#include <unistd.h>

#include <gtest/gtest.h>

#include "emulator/same_host/liveness_page.h"
#include "emulator/same_host/peer_pages.h"
#include "emulator/same_host/shared_pages.h"
#include "emulator/same_host/target_table_layout.h"
#include "emulator/transport/transport_test_fixture.h"

namespace softverbs {
namespace {

TEST(EngineLiveness, ThePageIsHeldWhenTheConstructorReturns) {
  if (!SharedPages::enabled()) GTEST_SKIP() << "SOFTVERBS_SHARE_MR_PAGES=0: no liveness page";
  // Many engines: each constructor returns before a thread it just started
  // would usually have run.
  for (int round = 0; round < 50; ++round) {
    auto wire = std::make_unique<LoopbackWire>();
    LoopbackWire& peers = *wire;
    Engine::Config config;
    config.same_host_peers = &peers;
    config.doorbell = &peers;
    config.wire = std::move(wire);
    config.qpns = std::make_unique<CountingQpns>();
    config.progress_thread = true;
    Engine engine(std::move(config));

    const auto& header =
        reinterpret_cast<const TargetTableLayout*>(peers.own_target_area().data())->header;
    ASSERT_NE(header.liveness_inode, 0u) << "no liveness page published";
    const std::shared_ptr<const PeerMapping> page = PeerPages::process().find(
        static_cast<uint32_t>(getpid()), header.liveness_fd, header.liveness_inode,
        PeerFile::kLiveness);
    ASSERT_TRUE(page && page->base) << "the page cannot be mapped as a peer maps it";
    ASSERT_TRUE(holder_alive(page->base)) << "round " << round << ": not yet alive to peers";
  }
}

}  // namespace
}  // namespace softverbs
