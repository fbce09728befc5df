// Device, port, GID and P_Key queries: ibv_get_device_list(3),
// ibv_query_device(3), ibv_query_device_ex(3), ibv_query_port(3),
// ibv_query_gid(3), ibv_query_pkey(3).
#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "conformance/device_fixture.h"
#include "harness/testsupport/test_config.h"

namespace softverbs::conformance {
namespace {

class DeviceQuery : public DeviceTest {
 protected:
  ibv_port_attr query_port1() {
    ibv_port_attr attr{};
    EXPECT_EQ(0, ibv_query_port(context(), port().port, &attr));
    return attr;
  }
  bool port_is_infiniband(const ibv_port_attr& attr) const {
    return attr.link_layer == IBV_LINK_LAYER_INFINIBAND ||
           attr.link_layer == IBV_LINK_LAYER_UNSPECIFIED;
  }
};

// ibv_get_device_list(3): "num_devices ... the number of devices returned";
// the array is NULL-terminated, and the device under test is in it.
TEST(DeviceList, CountMatchesNumDevicesAndTheListIsNullTerminated) {
  int num_devices = -1;
  ibv_device** list = ibv_get_device_list(&num_devices);
  ASSERT_NE(nullptr, list) << "ibv_get_device_list: " << describe_errno(errno);
  int counted = 0;
  bool found = false;
  while (list[counted]) {
    found |= test_config().device_name == ibv_get_device_name(list[counted]);
    ++counted;
  }
  ibv_free_device_list(list);
  EXPECT_EQ(counted, num_devices);
  EXPECT_GE(num_devices, 1);
  EXPECT_TRUE(found) << test_config().device_name << " is not in the device list";
}

// ibv_query_device(3): limits are positive and node_guid is the one
// ibv_get_device_guid(3) reports for the same device.
TEST_F(DeviceQuery, QueryDeviceReportsSaneLimitsAndTheDeviceGuid) {
  const ibv_device_attr& attr = device_attr();
  EXPECT_GT(attr.max_qp, 0);
  EXPECT_GT(attr.max_qp_wr, 0);
  EXPECT_GE(attr.max_sge, 1);
  EXPECT_GT(attr.max_cq, 0);
  EXPECT_GT(attr.max_cqe, 0);
  EXPECT_GT(attr.max_mr, 0);
  EXPECT_GT(attr.max_pd, 0);
  EXPECT_GT(attr.max_mr_size, 0u);
  EXPECT_GE(attr.phys_port_cnt, 1);
  EXPECT_NE(0u, attr.node_guid);
  EXPECT_EQ(ibv_get_device_guid(context()->device), attr.node_guid);
  EXPECT_NE(nullptr, std::memchr(attr.fw_ver, '\0', sizeof attr.fw_ver))
      << "fw_ver is not NUL-terminated";
}

// ibv_query_device_ex(3): orig_attr carries the same values as
// ibv_query_device.
TEST_F(DeviceQuery, QueryDeviceExAgreesWithQueryDevice) {
  ibv_device_attr_ex ex{};
  ASSERT_EQ(0, ibv_query_device_ex(context(), nullptr, &ex));
  const ibv_device_attr& a = device_attr();
  const ibv_device_attr& b = ex.orig_attr;
  EXPECT_STREQ(a.fw_ver, b.fw_ver);
  EXPECT_EQ(a.node_guid, b.node_guid);
  EXPECT_EQ(a.sys_image_guid, b.sys_image_guid);
  EXPECT_EQ(a.max_mr_size, b.max_mr_size);
  EXPECT_EQ(a.page_size_cap, b.page_size_cap);
  EXPECT_EQ(a.vendor_id, b.vendor_id);
  EXPECT_EQ(a.vendor_part_id, b.vendor_part_id);
  EXPECT_EQ(a.hw_ver, b.hw_ver);
  EXPECT_EQ(a.max_qp, b.max_qp);
  EXPECT_EQ(a.max_qp_wr, b.max_qp_wr);
  EXPECT_EQ(a.device_cap_flags, b.device_cap_flags);
  EXPECT_EQ(a.max_sge, b.max_sge);
  EXPECT_EQ(a.max_sge_rd, b.max_sge_rd);
  EXPECT_EQ(a.max_cq, b.max_cq);
  EXPECT_EQ(a.max_cqe, b.max_cqe);
  EXPECT_EQ(a.max_mr, b.max_mr);
  EXPECT_EQ(a.max_pd, b.max_pd);
  EXPECT_EQ(a.max_qp_rd_atom, b.max_qp_rd_atom);
  EXPECT_EQ(a.max_res_rd_atom, b.max_res_rd_atom);
  EXPECT_EQ(a.max_qp_init_rd_atom, b.max_qp_init_rd_atom);
  EXPECT_EQ(a.atomic_cap, b.atomic_cap);
  EXPECT_EQ(a.max_mw, b.max_mw);
  EXPECT_EQ(a.max_srq, b.max_srq);
  EXPECT_EQ(a.max_srq_wr, b.max_srq_wr);
  EXPECT_EQ(a.max_srq_sge, b.max_srq_sge);
  EXPECT_EQ(a.max_ah, b.max_ah);
  EXPECT_EQ(a.max_pkeys, b.max_pkeys);
  EXPECT_EQ(a.local_ca_ack_delay, b.local_ca_ack_delay);
  EXPECT_EQ(a.phys_port_cnt, b.phys_port_cnt);
}

// ibv_query_port(3) on port 1: ACTIVE, an active MTU the port supports,
// non-empty GID and P_Key tables; an active IB port has a unicast LID
// (unicast LIDs are 0x0001-0xBFFF).
TEST_F(DeviceQuery, Port1IsActiveWithConsistentAttributes) {
  ibv_port_attr attr = query_port1();
  EXPECT_EQ(IBV_PORT_ACTIVE, attr.state) << ibv_port_state_str(attr.state);
  EXPECT_GE(attr.active_mtu, IBV_MTU_256);
  EXPECT_LE(attr.max_mtu, IBV_MTU_4096);
  EXPECT_LE(attr.active_mtu, attr.max_mtu);
  EXPECT_GT(attr.gid_tbl_len, 0);
  EXPECT_GT(attr.pkey_tbl_len, 0);
  EXPECT_GT(attr.max_msg_sz, 0u);
  if (port_is_infiniband(attr)) {
    EXPECT_GE(attr.lid, 1);
    EXPECT_LE(attr.lid, 0xbfff);
  }
}

// ibv_query_port(3): ports are numbered 1..phys_port_cnt; anything else is
// an invalid argument.
TEST_F(DeviceQuery, QueryPortOutsideThePortRangeFailsWithEinval) {
  ibv_port_attr attr{};
  EXPECT_EQ(EINVAL, ibv_query_port(context(), 0, &attr));
  const auto beyond = static_cast<uint8_t>(device_attr().phys_port_cnt + 1);
  EXPECT_EQ(EINVAL, ibv_query_port(context(), beyond, &attr));
}

// ibv_query_gid(3); IBTA addressing: GID index 0 holds the port's default
// GID, on InfiniBand the link-local prefix fe80::/64 and the port GUID.
TEST_F(DeviceQuery, GidZeroIsTheDefaultGid) {
  ibv_gid gid{};
  ASSERT_EQ(0, ibv_query_gid(context(), port().port, 0, &gid));
  const ibv_gid zero{};
  EXPECT_NE(0, std::memcmp(gid.raw, zero.raw, sizeof gid.raw)) << "GID 0 is all zeros";
  if (port_is_infiniband(query_port1())) {
    const uint8_t link_local[8] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0};
    EXPECT_EQ(0, std::memcmp(gid.raw, link_local, sizeof link_local))
        << "GID 0 prefix is not fe80::/64";
  }
}

// ibv_query_gid(3) returns -1 for an index past gid_tbl_len.
TEST_F(DeviceQuery, GidIndexPastTheTableFails) {
  ibv_port_attr attr = query_port1();
  ibv_gid gid{};
  EXPECT_NE(0, ibv_query_gid(context(), port().port, attr.gid_tbl_len, &gid));
  EXPECT_NE(0, ibv_query_gid(context(), port().port, attr.gid_tbl_len + 100, &gid));
}

// ibv_query_pkey(3) (value in network byte order); IBTA partitioning: the
// default P_Key 0xFFFF (full member of the default partition) is at index 0.
TEST_F(DeviceQuery, PkeyZeroIsTheDefaultFullMemberPkey) {
  __be16 pkey = 0;
  ASSERT_EQ(0, ibv_query_pkey(context(), port().port, 0, &pkey));
  EXPECT_EQ(0xffff, ntohs(pkey));
}

// ibv_query_pkey(3) returns -1 for an index past pkey_tbl_len.
TEST_F(DeviceQuery, PkeyIndexPastTheTableFails) {
  ibv_port_attr attr = query_port1();
  __be16 pkey = 0;
  EXPECT_NE(0, ibv_query_pkey(context(), port().port, attr.pkey_tbl_len, &pkey));
}

// ibv_query_gid_ex(3) reads the same table as ibv_query_gid(3).
TEST_F(DeviceQuery, QueryGidExAgreesWithQueryGid) {
  ibv_gid gid{};
  ASSERT_EQ(0, ibv_query_gid(context(), port().port, 0, &gid));
  ibv_gid_entry entry{};
  int rc = ibv_query_gid_ex(context(), port().port, 0, &entry, 0);
  if (rc == EOPNOTSUPP) GTEST_SKIP() << "ibv_query_gid_ex not supported by this device";
  ASSERT_EQ(0, rc) << describe_errno(rc);
  EXPECT_EQ(0, std::memcmp(gid.raw, entry.gid.raw, sizeof gid.raw));
  EXPECT_EQ(0u, entry.gid_index);
  EXPECT_EQ(port().port, entry.port_num);
}

}  // namespace
}  // namespace softverbs::conformance
