// Multicast through the CM (rdma_join_multicast(3), RDMA_PS_UDP): a join
// gives MULTICAST_JOIN with the group's address handle attribute, QPN
// 0xFFFFFF and Q_Key, and attaches the id's QP; a datagram sent to the
// group through that AH reaches a member QP in another process; after
// rdma_leave_multicast the member gets nothing more. Kernel behaviour:
// docs/rdmacm-kernel-reference.md §3.14.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include "conformance/cm/cm_sides.h"
#include "conformance/cm/cm_test_config.h"
#include "conformance/cm/forked_peer.h"

namespace softverbs::conformance::cm {
namespace {

enum MulticastStep : uint32_t { kJoined = 1, kReceived = 2, kLeft = 3, kSentAgain = 4, kDone = 5 };

constexpr uint32_t kMulticastQpn = 0xffffff;
constexpr uint32_t kDefaultQkey = 0x01234567;  // RDMA_UDP_QKEY
constexpr uint32_t kSendSlot = 8;
constexpr uint32_t kDatagramBytes = 256;
constexpr uint8_t kDatagramSeed = 0x42;
constexpr auto kQuiet = 500ms;

// 239.1.x.y from the test process's id, so that runs on one fabric do not
// share a group.
sockaddr_in group_address(pid_t test_process) {
  sockaddr_in group{};
  group.sin_family = AF_INET;
  group.sin_addr.s_addr = htonl(0xef010000u | (static_cast<uint32_t>(test_process) & 0xffff));
  return group;
}

// An UD id with its address resolved from the test address to the group
// (as mckey does), a QP with `receives` receives, and the group joined.
void join_group(ActiveSide& side, sockaddr_in group, uint32_t receives, void* context,
                CmEvent& joined) {
  side.channel = make_channel();
  ASSERT_TRUE(side.channel);
  side.id = make_id(side.channel.get(), RDMA_PS_UDP);
  ASSERT_TRUE(side.id);
  sockaddr_in source = test_address(0);
  ASSERT_EQ(0, rdma_resolve_addr(side.id.get(), reinterpret_cast<sockaddr*>(&source),
                                 reinterpret_cast<sockaddr*>(&group), 2000))
      << strerror(errno);
  ASSERT_TRUE(is_event(next_event(side.channel.get()), RDMA_CM_EVENT_ADDR_RESOLVED));
  ASSERT_NO_FATAL_FAILURE(add_qp_and_buffer(side.id.get(), side.buffer, receives));
  ASSERT_EQ(0, rdma_join_multicast(side.id.get(), reinterpret_cast<sockaddr*>(&group), context))
      << strerror(errno);
  joined = next_event(side.channel.get());
  ASSERT_TRUE(is_event(joined, RDMA_CM_EVENT_MULTICAST_JOIN));
}

void check_join(const CmEvent& joined, const ActiveSide& side, sockaddr_in group, void* context) {
  EXPECT_EQ(side.id.get(), joined.id);
  EXPECT_EQ(context, joined.ud_private_data_pointer) << "the event carries the join's context";
  EXPECT_EQ(kMulticastQpn, joined.ud.qp_num);
  EXPECT_EQ(kDefaultQkey, joined.ud.qkey);
  EXPECT_EQ(side.id->port_num, joined.ud.ah_attr.port_num);
  EXPECT_EQ(1, joined.ud.ah_attr.is_global);
  ibv_port_attr port{};
  ASSERT_EQ(0, ibv_query_port(side.id->verbs, side.id->port_num, &port));
  if (port.link_layer == IBV_LINK_LAYER_ETHERNET) {
    // RoCEv2: the MGID is the group's IPv4-mapped address.
    uint8_t mgid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    std::memcpy(mgid + 12, &group.sin_addr, 4);
    EXPECT_EQ(0, std::memcmp(mgid, joined.ud.ah_attr.grh.dgid.raw, sizeof mgid));
  }
}

TEST(CmMulticast, JoinGivesTheGroupsAddressHandleAndLeaveEndsIt) {
  run_in_fresh_process([] {
    const sockaddr_in group = group_address(getpid());
    int context = 0;
    ActiveSide side;
    CmEvent joined;
    ASSERT_NO_FATAL_FAILURE(join_group(side, group, 0, &context, joined));
    check_join(joined, side, group, &context);
    sockaddr_in other = group_address(getpid() + 1);
    EXPECT_EQ(-1, rdma_leave_multicast(side.id.get(), reinterpret_cast<sockaddr*>(&other)));
    EXPECT_EQ(EADDRNOTAVAIL, errno) << "leaving a group never joined: " << strerror(errno);
    sockaddr_in joined_group = group;
    EXPECT_EQ(0, rdma_leave_multicast(side.id.get(), reinterpret_cast<sockaddr*>(&joined_group)))
        << strerror(errno);
    EXPECT_TRUE(no_event_within(side.channel.get(), 200ms));
  });
}

void expect_datagram(ActiveSide& side) {
  ibv_wc wc{};
  ASSERT_TRUE(wait_success(side.id->recv_cq, IBV_WC_RECV, wc));
  EXPECT_EQ(kGrhBytes + kDatagramBytes, wc.byte_len);
  EXPECT_TRUE(has_pattern(side.buffer.slot(wc.wr_id) + kGrhBytes, kDatagramBytes, kDatagramSeed));
}

void group_member(PeerLink& link, sockaddr_in group) {
  ActiveSide side;
  CmEvent joined;
  ASSERT_NO_FATAL_FAILURE(join_group(side, group, 2, nullptr, joined));
  ASSERT_TRUE(link.signal(kJoined));
  ASSERT_NO_FATAL_FAILURE(expect_datagram(side));
  ASSERT_TRUE(link.signal(kReceived));
  ASSERT_EQ(0, rdma_leave_multicast(side.id.get(), reinterpret_cast<sockaddr*>(&group)))
      << strerror(errno);
  ASSERT_TRUE(link.signal(kLeft));
  ASSERT_TRUE(link.wait_for(kSentAgain));
  EXPECT_TRUE(no_completion_within(side.id->recv_cq, kQuiet)) << "a datagram after the leave";
  ASSERT_TRUE(link.wait_for(kDone));
}

void send_to_group(ActiveSide& side, ibv_ah* ah, const CmEvent& joined) {
  fill_pattern(side.buffer.slot(kSendSlot), kDatagramBytes, kDatagramSeed);
  ASSERT_TRUE(post_ud_send(side.id->qp, side.buffer, kSendSlot, kDatagramBytes, ah,
                           joined.ud.qp_num, joined.ud.qkey));
  ibv_wc wc{};
  ASSERT_TRUE(wait_success(side.id->send_cq, IBV_WC_SEND, wc));
}

TEST(CmMulticast, DatagramReachesAMemberInAnotherProcessUntilItLeaves) {
  run_in_fresh_process([] {
    const sockaddr_in group = group_address(getpid());
    ForkedPeer member("group member", [group](PeerLink& link) { group_member(link, group); });
    ActiveSide side;
    CmEvent joined;
    ASSERT_NO_FATAL_FAILURE(join_group(side, group, 0, nullptr, joined));
    ibv_ah_attr ah_attr = joined.ud.ah_attr;
    AddressHandle ah(ibv_create_ah(side.id->pd, &ah_attr));
    ASSERT_TRUE(ah) << "ibv_create_ah from MULTICAST_JOIN: " << strerror(errno);
    ASSERT_TRUE(member.link().wait_for(kJoined));
    ASSERT_NO_FATAL_FAILURE(send_to_group(side, ah.get(), joined));
    ASSERT_TRUE(member.link().wait_for(kReceived));
    ASSERT_TRUE(member.link().wait_for(kLeft));
    ASSERT_NO_FATAL_FAILURE(send_to_group(side, ah.get(), joined));
    ASSERT_TRUE(member.link().signal(kSentAgain));
    ASSERT_TRUE(member.link().signal(kDone));
    EXPECT_TRUE(member.join());
  });
}

// A sender that returns from main while a thread of its waits in
// rdma_get_cm_event on the id's channel: with the kernel the channel stays
// valid until the process is gone and the thread simply never returns, so
// the process ends with the status it chose, every time.
TEST(CmMulticast, ASenderExitsWhileAThreadWaitsForEvents) {
  constexpr int kRuns = 10;
  for (int run = 0; run < kRuns; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    run_in_fresh_process([] {
      const sockaddr_in group = group_address(getpid());
      auto* side = new ActiveSide;  // left for the exit, as the program leaves it
      CmEvent joined;
      ASSERT_NO_FATAL_FAILURE(join_group(*side, group, 0, nullptr, joined));
      ibv_ah_attr ah_attr = joined.ud.ah_attr;
      ibv_ah* ah = ibv_create_ah(side->id->pd, &ah_attr);
      ASSERT_TRUE(ah) << "ibv_create_ah from MULTICAST_JOIN: " << strerror(errno);
      rdma_event_channel* channel = side->channel.get();
      std::thread([channel] {
        rdma_cm_event* event = nullptr;
        while (rdma_get_cm_event(channel, &event) == 0) rdma_ack_cm_event(event);
      }).detach();
      for (int i = 0; i < 4; ++i) ASSERT_NO_FATAL_FAILURE(send_to_group(*side, ah, joined));
      sockaddr_in joined_group = group;
      ASSERT_EQ(0, rdma_leave_multicast(side->id.get(), reinterpret_cast<sockaddr*>(&joined_group)))
          << strerror(errno);
    });
  }
}

}  // namespace
}  // namespace softverbs::conformance::cm
