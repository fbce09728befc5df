// What an Ethernet (RoCE) port shows, as the kernel presents rxe and RoCE
// HCAs: no LID, a GRH in every address, GIDs that are the IP addresses of
// the net devices they name (ibv_query_gid_ex(3), ibv_query_gid_table(3)),
// an active MTU whose packets fit those net devices' frames. Skipped on
// InfiniBand ports.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "conformance/device_fixture.h"

namespace softverbs::conformance {
namespace {

// GRH 40 + UDP 8 + BTH 12 + the largest extended headers 32 + ICRC 4.
constexpr int kRoceHeaderBytes = 96;

bool is_ipv4_mapped(const ibv_gid& gid) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, prefix, sizeof prefix) == 0;
}

// Whether the interface with this index holds the IPv4 address `address_be`.
bool interface_holds_ipv4(uint32_t ifindex, uint32_t address_be) {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return false;
  bool found = false;
  for (const ifaddrs* entry = all; entry && !found; entry = entry->ifa_next) {
    if (!entry->ifa_addr || entry->ifa_addr->sa_family != AF_INET) continue;
    const auto* ip = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
    found = if_nametoindex(entry->ifa_name) == ifindex && ip->sin_addr.s_addr == address_be;
  }
  freeifaddrs(all);
  return found;
}

int interface_mtu(uint32_t ifindex) {
  char name[IF_NAMESIZE] = {};
  if (!if_indextoname(ifindex, name)) return -1;
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ifreq request{};
  std::strncpy(request.ifr_name, name, IFNAMSIZ - 1);
  int mtu = fd >= 0 && ioctl(fd, SIOCGIFMTU, &request) == 0 ? request.ifr_mtu : -1;
  if (fd >= 0) close(fd);
  return mtu;
}

class RocePort : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_EQ(0, ibv_query_port(context(), port().port, &attr_));
    if (attr_.link_layer != IBV_LINK_LAYER_ETHERNET) GTEST_SKIP() << "port 1 is not Ethernet";
  }

  std::vector<ibv_gid_entry> gid_table() {
    std::vector<ibv_gid_entry> entries(attr_.gid_tbl_len);
    ssize_t n = ibv_query_gid_table(context(), entries.data(), entries.size(), 0);
    EXPECT_GE(n, 1) << describe_errno(static_cast<int>(-n));
    entries.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return entries;
  }

  ibv_port_attr attr_{};
};

// A RoCE port has no subnet manager and no LID; every packet carries a GRH.
TEST_F(RocePort, HasNoLidAndRequiresAGrh) {
  EXPECT_EQ(0, attr_.lid);
  EXPECT_EQ(0, attr_.lmc);
  EXPECT_TRUE(attr_.flags & IBV_QPF_GRH_REQUIRED);
}

// Every entry is a RoCE GID naming a net device; an IPv4-mapped GID is an
// address of that very net device.
TEST_F(RocePort, EveryGidNamesTheNetDeviceHoldingIt) {
  bool has_ipv4 = false;
  for (const ibv_gid_entry& entry : gid_table()) {
    SCOPED_TRACE("GID index " + std::to_string(entry.gid_index));
    EXPECT_TRUE(entry.gid_type == IBV_GID_TYPE_ROCE_V2 || entry.gid_type == IBV_GID_TYPE_ROCE_V1);
    EXPECT_EQ(port().port, entry.port_num);
    EXPECT_NE(0u, entry.ndev_ifindex);
    if (!is_ipv4_mapped(entry.gid)) continue;
    has_ipv4 = true;
    uint32_t address_be;
    std::memcpy(&address_be, entry.gid.raw + 12, 4);
    EXPECT_TRUE(interface_holds_ipv4(entry.ndev_ifindex, address_be));
  }
  EXPECT_TRUE(has_ipv4) << "a RoCE port on a host with IPv4 has an IPv4-mapped GID";
}

// ibv_query_gid_ex(3) answers for one index what the table holds; the
// v2 type is what ibv_query_gid_type(3) calls RoCE v2.
TEST_F(RocePort, QueryGidExAndGidTypeAgreeWithTheTable) {
  for (const ibv_gid_entry& entry : gid_table()) {
    ibv_gid_entry one{};
    ASSERT_EQ(0, ibv_query_gid_ex(context(), port().port, entry.gid_index, &one, 0));
    EXPECT_EQ(0, std::memcmp(one.gid.raw, entry.gid.raw, sizeof one.gid.raw));
    EXPECT_EQ(entry.ndev_ifindex, one.ndev_ifindex);
    EXPECT_EQ(entry.gid_type, one.gid_type);
  }
}

// A packet at the active MTU, with its headers, fits the frame of every net
// device the port's GIDs name.
TEST_F(RocePort, ActiveMtuFitsTheNetDevicesFrames) {
  const int payload = 128 << attr_.active_mtu;
  for (const ibv_gid_entry& entry : gid_table()) {
    const int mtu = interface_mtu(entry.ndev_ifindex);
    ASSERT_GT(mtu, 0) << "ifindex " << entry.ndev_ifindex;
    EXPECT_LE(payload + kRoceHeaderBytes, mtu) << "ifindex " << entry.ndev_ifindex;
  }
}

// The kernel refuses an address vector without a GRH on RoCE (EINVAL), in
// ibv_modify_qp to RTR and in ibv_create_ah alike, and changes nothing.
TEST_F(RocePort, AddressWithoutGrhIsEinval) {
  PdPtr pd = alloc_pd();
  CqPtr cq = create_cq();
  QpPtr qp = create_qp(pd.get(), cq.get(), cq.get());
  ASSERT_TRUE(pd && cq && qp) << describe_errno(last_error_);
  ASSERT_EQ(0, modify_rc_to_init(qp.get(), port(), RcParameters{}));
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = attr_.active_mtu;
  attr.dest_qp_num = qp->qp_num;
  attr.rq_psn = 0;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = port().port;
  attr.ah_attr.is_global = 0;
  const int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  EXPECT_EQ(EINVAL, ibv_modify_qp(qp.get(), &attr, mask));
  ibv_qp_attr now{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(0, ibv_query_qp(qp.get(), &now, IBV_QP_STATE, &init));
  EXPECT_EQ(IBV_QPS_INIT, now.qp_state);

  ibv_ah_attr ah{};
  ah.port_num = port().port;
  errno = 0;
  ibv_ah* made = ibv_create_ah(pd.get(), &ah);
  EXPECT_EQ(nullptr, made);
  EXPECT_EQ(EINVAL, errno);
  if (made) ibv_destroy_ah(made);
}

}  // namespace
}  // namespace softverbs::conformance
