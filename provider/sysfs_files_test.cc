#include "provider/sysfs_files.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "emulator/objects/hca.h"

namespace softverbs::provider {
namespace {

DeviceDescription ib_device() {
  DeviceDescription device;
  device.name = "softverbs0";
  device.index = 0;
  device.node_guid = 0x025356fffe000001ull;
  device.link_layer = LinkLayer::kInfiniBand;
  device.lid = 1;
  Gid gid{};
  gid[0] = 0xfe;
  gid[1] = 0x80;
  for (int i = 0; i < 8; ++i) gid[8 + i] = static_cast<uint8_t>(device.node_guid >> (56 - 8 * i));
  device.gids.push_back(GidEntry{gid, 0, {}});
  return device;
}

std::string read(const DeviceDescription& device, const char* file) {
  std::string content;
  EXPECT_EQ(ibdev_sysfs_file(device, file, content), 0) << file;
  return content;
}

TEST(SysfsFiles, GuidIsFourGroupsOfFourHexDigits) {
  EXPECT_EQ(sysfs_guid(0x025356fffe000001ull), "0253:56ff:fe00:0001");
  EXPECT_EQ(read(ib_device(), "node_guid"), "0253:56ff:fe00:0001\n");
}

TEST(SysfsFiles, BoardIdExistsForIbvDevinfo) {
  EXPECT_EQ(read(ib_device(), "board_id"), "softverbs\n");
}

TEST(SysfsFiles, PortFilesFollowTheKernelsFormat) {
  const auto device = ib_device();
  EXPECT_EQ(read(device, "ports/1/lid"), "0x1\n");
  EXPECT_EQ(read(device, "ports/1/state"), "4: ACTIVE\n");
  EXPECT_EQ(read(device, "ports/1/phys_state"), "5: LinkUp\n");
  EXPECT_EQ(read(device, "ports/1/link_layer"), "InfiniBand\n");
  EXPECT_EQ(read(device, "ports/1/rate"), "100 Gb/sec (4X EDR)\n");
  EXPECT_EQ(read(device, "ports/1/pkeys/0"), "0xffff\n");
}

// libibumad (ibstat) reads these for every port and device, and gives up on
// the device when one is missing.
TEST(SysfsFiles, SubnetManagerAndFirmwareFilesAreThereForIbstat) {
  const auto device = ib_device();
  EXPECT_EQ(read(device, "ports/1/sm_lid"), "0x1\n");
  EXPECT_EQ(read(device, "ports/1/sm_sl"), "0\n");
  const std::string fw_ver = read(device, "fw_ver");
  EXPECT_EQ(fw_ver, device_attributes_of(device).fw_ver + "\n");
  EXPECT_GT(fw_ver.size(), 1u);
  auto roce = ib_device();
  roce.link_layer = LinkLayer::kEthernet;
  EXPECT_EQ(read(roce, "ports/1/sm_lid"), "0x0\n");
}

TEST(SysfsFiles, GidTableShowsTheLinkLocalGidThenZeros) {
  const auto device = ib_device();
  EXPECT_EQ(read(device, "ports/1/gids/0"), "fe80:0000:0000:0000:0253:56ff:fe00:0001\n");
  EXPECT_EQ(read(device, "ports/1/gids/1"), "0000:0000:0000:0000:0000:0000:0000:0000\n");
  std::string content;
  EXPECT_EQ(ibdev_sysfs_file(device, "ports/1/gids/16", content), ENOENT);
}

TEST(SysfsFiles, InfiniBandHasNoGidTypesLikeTheKernel) {
  std::string content;
  EXPECT_EQ(ibdev_sysfs_file(ib_device(), "ports/1/gid_attrs/types/0", content), EINVAL);
}

TEST(SysfsFiles, UnknownFilesAndPortsDoNotExist) {
  std::string content;
  EXPECT_EQ(ibdev_sysfs_file(ib_device(), "no_such_file", content), ENOENT);
  EXPECT_EQ(ibdev_sysfs_file(ib_device(), "ports/2/lid", content), ENOENT);
  EXPECT_EQ(ibdev_sysfs_file(ib_device(), "ports/1/gids/x", content), ENOENT);
}

TEST(SysfsFiles, FileNamesListEveryReadableFileOnce) {
  const auto names = ibdev_sysfs_file_names(ib_device());
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  for (const char* expected : {"node_guid", "board_id", "ports/1/lid", "ports/1/gids/0",
                               "ports/1/gids/15", "ports/1/pkeys/0", "ports/1/link_layer"})
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  for (const std::string& name : names) {
    std::string content;
    EXPECT_EQ(ibdev_sysfs_file(ib_device(), name, content), 0) << name;
  }
  // InfiniBand has no GID types: those reads fail, so they are not listed.
  EXPECT_EQ(std::find(names.begin(), names.end(), "ports/1/gid_attrs/types/0"), names.end());
}

TEST(SysfsFiles, UverbsDirectoryNamesTheDevice) {
  std::string content;
  ASSERT_EQ(uverbs_sysfs_file(ib_device(), "ibdev", content), 0);
  EXPECT_EQ(content, "softverbs0\n");
}

TEST(SysfsFiles, CopyStripsTheNewlineAndTerminates) {
  char buf[16];
  std::memset(buf, 'x', sizeof(buf));
  EXPECT_EQ(copy_sysfs_content("0x1\n", buf, sizeof(buf)), 3);
  EXPECT_STREQ(buf, "0x1");
}

TEST(SysfsFiles, CopyFailsWhenTheTextDoesNotFit) {
  char buf[4];
  EXPECT_EQ(copy_sysfs_content("abcdef\n", buf, sizeof(buf)), -1);
  // Exactly fitting once the newline is dropped.
  EXPECT_EQ(copy_sysfs_content("abc\n", buf, sizeof(buf)), 3);
  EXPECT_STREQ(buf, "abc");
}

}  // namespace
}  // namespace softverbs::provider
