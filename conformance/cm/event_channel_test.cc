// The event channel (rdma_create_event_channel(3), rdma_get_cm_event(3)):
// its fd is readable exactly while an event is queued, so poll(2) and
// O_NONBLOCK work on it; an id cannot be destroyed before its delivered
// events are acked; an id's undelivered events go with it; rdma_migrate_id
// moves an id and its queued events to another channel. Kernel behaviour:
// docs/rdmacm-kernel-reference.md §1.2, §3.2, §3.12.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "conformance/cm/cm_events.h"
#include "conformance/cm/cm_handles.h"
#include "conformance/cm/cm_test_config.h"
#include "conformance/cm/forked_peer.h"

namespace softverbs::conformance::cm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint16_t kDestinationPort = 7471;

// poll(2) on the channel's fd: its revents, 0 when not readable in `wait`.
short poll_channel(rdma_event_channel* channel, std::chrono::milliseconds wait) {
  pollfd p{channel->fd, POLLIN, 0};
  int ready = ::poll(&p, 1, static_cast<int>(wait.count()));
  return ready > 0 ? p.revents : 0;
}

// Starts address resolution; its ADDR_RESOLVED will be queued.
void start_resolve(rdma_cm_id* id) {
  sockaddr_in destination = test_address(kDestinationPort);
  ASSERT_EQ(0, rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&destination), 2000))
      << strerror(errno);
}

TEST(CmEventChannel, FdIsReadableExactlyWhileAnEventIsQueued) {
  run_in_fresh_process([] {
    Channel channel = make_channel();
    ASSERT_TRUE(channel);
    CmId id = make_id(channel.get(), RDMA_PS_TCP);
    ASSERT_TRUE(id);
    EXPECT_EQ(0, poll_channel(channel.get(), 0ms));
    ASSERT_NO_FATAL_FAILURE(start_resolve(id.get()));
    EXPECT_EQ(POLLIN, poll_channel(channel.get(), kEventTimeout) & POLLIN);
    rdma_cm_event* event = nullptr;
    ASSERT_EQ(0, rdma_get_cm_event(channel.get(), &event)) << strerror(errno);
    EXPECT_EQ(RDMA_CM_EVENT_ADDR_RESOLVED, event->event);
    EXPECT_EQ(0, rdma_ack_cm_event(event));
    EXPECT_EQ(0, poll_channel(channel.get(), 0ms));
  });
}

TEST(CmEventChannel, NonBlockingGetWithNoEventFailsWithEagain) {
  run_in_fresh_process([] {
    Channel channel = make_channel();
    ASSERT_TRUE(channel);
    CmId id = make_id(channel.get(), RDMA_PS_TCP);
    ASSERT_TRUE(id);
    const int flags = fcntl(channel->fd, F_GETFL);
    ASSERT_EQ(0, fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK));
    rdma_cm_event* event = nullptr;
    EXPECT_EQ(-1, rdma_get_cm_event(channel.get(), &event));
    EXPECT_EQ(EAGAIN, errno) << strerror(errno);
    ASSERT_NO_FATAL_FAILURE(start_resolve(id.get()));
    ASSERT_EQ(POLLIN, poll_channel(channel.get(), kEventTimeout) & POLLIN);
    ASSERT_EQ(0, rdma_get_cm_event(channel.get(), &event)) << strerror(errno);
    EXPECT_EQ(RDMA_CM_EVENT_ADDR_RESOLVED, event->event);
    EXPECT_EQ(0, rdma_ack_cm_event(event));
    EXPECT_EQ(-1, rdma_get_cm_event(channel.get(), &event));
    EXPECT_EQ(EAGAIN, errno) << strerror(errno);
  });
}

// rdma_destroy_id(3): "the user must ack all events related to the id
// before destroying it"; librdmacm waits for as many acks as the kernel
// says it delivered (the DESTROY_ID answer), so the call returns only after
// the ack another thread makes.
TEST(CmEventChannel, DestroyIdReturnsOnlyAfterItsEventIsAcked) {
  run_in_fresh_process([] {
    constexpr auto kAckDelay = 300ms;
    Channel channel = make_channel();
    ASSERT_TRUE(channel);
    rdma_cm_id* id = nullptr;
    ASSERT_EQ(0, rdma_create_id(channel.get(), &id, nullptr, RDMA_PS_TCP));
    ASSERT_NO_FATAL_FAILURE(start_resolve(id));
    ASSERT_EQ(POLLIN, poll_channel(channel.get(), kEventTimeout) & POLLIN);
    rdma_cm_event* event = nullptr;
    ASSERT_EQ(0, rdma_get_cm_event(channel.get(), &event)) << strerror(errno);
    const auto start = Clock::now();
    std::thread acker([event, kAckDelay] {
      std::this_thread::sleep_for(kAckDelay);
      rdma_ack_cm_event(event);
    });
    EXPECT_EQ(0, rdma_destroy_id(id)) << strerror(errno);
    const auto waited = Clock::now() - start;
    acker.join();
    EXPECT_GE(waited, kAckDelay - 50ms) << "rdma_destroy_id returned before the event was acked";
  });
}

TEST(CmEventChannel, DestroyingAnIdDropsItsUndeliveredEvents) {
  run_in_fresh_process([] {
    Channel channel = make_channel();
    ASSERT_TRUE(channel);
    CmId id = make_id(channel.get(), RDMA_PS_TCP);
    ASSERT_TRUE(id);
    ASSERT_NO_FATAL_FAILURE(start_resolve(id.get()));
    ASSERT_EQ(POLLIN, poll_channel(channel.get(), kEventTimeout) & POLLIN);
    id.reset();  // ADDR_RESOLVED queued, never taken
    EXPECT_TRUE(no_event_within(channel.get(), 300ms));
  });
}

TEST(CmEventChannel, TwoIdsShareOneChannel) {
  run_in_fresh_process([] {
    Channel channel = make_channel();
    ASSERT_TRUE(channel);
    int first_context = 1, second_context = 2;
    CmId first = make_id(channel.get(), RDMA_PS_TCP, &first_context);
    CmId second = make_id(channel.get(), RDMA_PS_TCP, &second_context);
    ASSERT_TRUE(first && second);
    ASSERT_NO_FATAL_FAILURE(start_resolve(first.get()));
    ASSERT_NO_FATAL_FAILURE(start_resolve(second.get()));
    const CmEvent a = next_event(channel.get());
    const CmEvent b = next_event(channel.get());
    ASSERT_TRUE(is_event(a, RDMA_CM_EVENT_ADDR_RESOLVED));
    ASSERT_TRUE(is_event(b, RDMA_CM_EVENT_ADDR_RESOLVED));
    EXPECT_NE(a.id, b.id);
    for (const CmEvent* event : {&a, &b}) {
      EXPECT_TRUE(event->id == first.get() || event->id == second.get());
      EXPECT_EQ(event->id == first.get() ? &first_context : &second_context, event->id->context);
    }
    EXPECT_TRUE(no_event_within(channel.get(), 200ms));
  });
}

TEST(CmEventChannel, MigrateIdMovesItsQueuedEvents) {
  run_in_fresh_process([] {
    Channel from = make_channel();
    Channel to = make_channel();
    ASSERT_TRUE(from && to);
    CmId id = make_id(from.get(), RDMA_PS_TCP);
    ASSERT_TRUE(id);
    ASSERT_NO_FATAL_FAILURE(start_resolve(id.get()));
    ASSERT_EQ(POLLIN, poll_channel(from.get(), kEventTimeout) & POLLIN);
    ASSERT_EQ(0, rdma_migrate_id(id.get(), to.get())) << strerror(errno);
    EXPECT_EQ(to.get(), id->channel);
    EXPECT_EQ(0, poll_channel(from.get(), 0ms));
    const CmEvent event = next_event(to.get());
    ASSERT_TRUE(is_event(event, RDMA_CM_EVENT_ADDR_RESOLVED));
    EXPECT_EQ(id.get(), event.id);
  });
}

}  // namespace
}  // namespace softverbs::conformance::cm
