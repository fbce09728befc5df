// Multicast (IBTA 10.5; ibv_attach_mcast(3)): a datagram sent to a group
// (DestQP 0xFFFFFF, the group's GID and LID) reaches every UD QP attached
// to it, in every process on the fabric, but not the QP that sent it; a QP
// that detached gets nothing more; only UD QPs join, and only groups.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "conformance/datagram_endpoint.h"
#include "harness/testsupport/soft_control.h"

namespace softverbs::conformance {
namespace {

using testsupport::qp_counter;
using testsupport::soft_control;
using testsupport::soft_control_available;

constexpr auto kWait = std::chrono::milliseconds(5000);
constexpr auto kQuiet = std::chrono::milliseconds(300);
constexpr uint16_t kGroupLid = 0xc001;
constexpr uint32_t kMulticastQpn = 0xffffff;
constexpr int kMessages = 3;
constexpr uint32_t kLength = 256;

ibv_gid test_group() {
  ibv_gid gid{};
  const uint8_t raw[16] = {0xff, 0x12, 0x40, 0x1b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34};
  std::memcpy(gid.raw, raw, sizeof raw);
  return gid;
}

bool payload_ok(const uint8_t* p, int message) {
  for (uint32_t i = 0; i < kLength; ++i)
    if (p[i] != static_cast<uint8_t>(message * 31 + i)) return false;
  return true;
}

// A member in a process of its own: joins, says so on `ready`, and exits 0
// once it received every message intact and nothing more.
int run_member(int ready) {
  DatagramEndpoint self;
  if (!self.error().empty()) return 2;
  for (int i = 0; i < kMessages + 1; ++i)
    if (self.post_recv(i, uint64_t(i) * 4096, 4096)) return 3;
  const ibv_gid group = test_group();
  if (ibv_attach_mcast(self.qp(), &group, kGroupLid)) return 4;
  const char byte = 1;
  if (write(ready, &byte, 1) != 1) return 5;
  const std::vector<ibv_wc> wcs = self.poll(kMessages, kWait);
  if (wcs.size() != kMessages) return 6;
  for (int i = 0; i < kMessages; ++i) {
    if (wcs[i].status != IBV_WC_SUCCESS || wcs[i].byte_len != kLength + kGrhBytes) return 7;
    if (!(wcs[i].wc_flags & IBV_WC_GRH)) return 8;
    if (!payload_ok(self.buffer() + uint64_t(i) * 4096 + kGrhBytes, i)) return 9;
  }
  if (!self.poll(1, kQuiet).empty()) return 10;  // each message once
  return ibv_detach_mcast(self.qp(), &group, kGroupLid) == 0 ? 0 : 11;
}

bool wait_ready(int fd, int count) {
  for (int got = 0; got < count;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10000) != 1) return false;
    char byte;
    if (read(fd, &byte, 1) != 1) return false;
    ++got;
  }
  return true;
}

TEST(Multicast, ADatagramToAGroupReachesEveryMemberProcessButNotItsSender) {
  int pipe_fds[2];
  ASSERT_EQ(0, pipe(pipe_fds));
  constexpr int kMemberProcesses = 3;
  pid_t members[kMemberProcesses];
  for (pid_t& pid : members) {
    pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      alarm(30);  // never outlive a broken test
      _exit(run_member(pipe_fds[1]));
    }
  }
  close(pipe_fds[1]);
  ASSERT_TRUE(wait_ready(pipe_fds[0], kMemberProcesses));
  close(pipe_fds[0]);

  // In this process: the sender, itself a member, and one more member.
  DatagramEndpoint sender, local_member;
  ASSERT_EQ("", sender.error());
  ASSERT_EQ("", local_member.error());
  const ibv_gid group = test_group();
  ASSERT_EQ(0, ibv_attach_mcast(sender.qp(), &group, kGroupLid));
  ASSERT_EQ(0, ibv_attach_mcast(local_member.qp(), &group, kGroupLid));
  for (int i = 0; i < kMessages + 1; ++i) {
    ASSERT_EQ(0, sender.post_recv(i, uint64_t(i) * 4096, 4096));
    ASSERT_EQ(0, local_member.post_recv(i, uint64_t(i) * 4096, 4096));
  }
  ibv_ah* ah = sender.make_group_ah(group, kGroupLid);
  ASSERT_NE(nullptr, ah) << strerror(errno);
  for (int m = 0; m < kMessages; ++m) {
    uint8_t* p = sender.buffer() + 0x80000 + uint64_t(m) * 4096;
    for (uint32_t i = 0; i < kLength; ++i) p[i] = static_cast<uint8_t>(m * 31 + i);
    ASSERT_EQ(0, sender.send(ah, kMulticastQpn, kTestQkey, 100 + m, 0x80000 + uint64_t(m) * 4096,
                             kLength));
  }
  // No copy for the sending QP, as rxe does (mlx5 loops a group's datagrams
  // back to their sender unless IBV_QP_CREATE_BLOCK_SELF_MCAST_LB is set).
  const std::vector<ibv_wc> at_sender = sender.poll(kMessages + 1, kQuiet);
  EXPECT_EQ(size_t(kMessages), at_sender.size()) << "the sender got its own datagrams";
  for (const ibv_wc& wc : at_sender) EXPECT_EQ(IBV_WC_SEND, wc.opcode);
  const std::vector<ibv_wc> at_member = local_member.poll(kMessages, kWait);
  ASSERT_EQ(size_t(kMessages), at_member.size());
  for (int i = 0; i < kMessages; ++i) {
    EXPECT_EQ(sender.qp()->qp_num, at_member[i].src_qp);
    EXPECT_TRUE(payload_ok(local_member.buffer() + uint64_t(i) * 4096 + kGrhBytes, i));
  }
  for (pid_t pid : members) {
    int status = 0;
    ASSERT_EQ(pid, waitpid(pid, &status, 0));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "member process status " << status;
  }
}

TEST(Multicast, ADetachedQpGetsNothingMore) {
  DatagramEndpoint sender, member;
  ASSERT_EQ("", sender.error());
  ASSERT_EQ("", member.error());
  const ibv_gid group = test_group();
  ASSERT_EQ(0, ibv_attach_mcast(member.qp(), &group, kGroupLid));
  ASSERT_EQ(0, member.post_recv(1, 0, 4096));
  ASSERT_EQ(0, member.post_recv(2, 4096, 4096));
  ibv_ah* ah = sender.make_group_ah(group, kGroupLid);
  ASSERT_NE(nullptr, ah);
  ASSERT_EQ(0, sender.send(ah, kMulticastQpn, kTestQkey, 1, 0, 8));
  EXPECT_EQ(1u, member.poll(1, kWait).size());
  ASSERT_EQ(0, ibv_detach_mcast(member.qp(), &group, kGroupLid));
  EXPECT_EQ(EINVAL, ibv_detach_mcast(member.qp(), &group, kGroupLid));
  ASSERT_EQ(0, sender.send(ah, kMulticastQpn, kTestQkey, 2, 0, 8));
  EXPECT_TRUE(member.poll(1, kQuiet).empty());
  // Where the datagram went on InfiniBand: nowhere, and counted. (A RoCE
  // group is an IP group: the datagram also goes to the network, where
  // other hosts may have members.)
  if (soft_control_available() && !sender.on_ethernet()) {
    std::string stats;
    ASSERT_EQ(0, soft_control("stats", stats));
    EXPECT_EQ(1u, qp_counter(stats, sender.qp()->qp_num, "datagrams_to_empty_groups")) << stats;
  }
}

TEST(Multicast, OnlyUdQpsJoinAndOnlyGroups) {
  DatagramEndpoint ud;
  ASSERT_EQ("", ud.error());
  ibv_gid unicast{};
  unicast.raw[0] = 0xfe;
  unicast.raw[1] = 0x80;
  EXPECT_EQ(EINVAL, ibv_attach_mcast(ud.qp(), &unicast, kGroupLid));
  ibv_cq* cq = ibv_create_cq(ud.context(), 4, nullptr, nullptr, 0);
  ASSERT_NE(nullptr, cq);
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap = {1, 1, 1, 1, 0};
  ibv_qp* rc = ibv_create_qp(ud.pd(), &init);
  ASSERT_NE(nullptr, rc);
  const ibv_gid group = test_group();
  EXPECT_EQ(EINVAL, ibv_attach_mcast(rc, &group, kGroupLid));
  ibv_destroy_qp(rc);
  ibv_destroy_cq(cq);
}

}  // namespace
}  // namespace softverbs::conformance
