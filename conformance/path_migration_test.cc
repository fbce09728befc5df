// Automatic path migration (IBTA 17.2.8; ibv_modify_qp(3), ibv_query_qp(3),
// ibv_get_async_event(3)), two processes on a device with two InfiniBand
// ports: each QP's primary path is on port 1 and its alternate path on the
// other port, loaded in RTS with IBV_MIG_REARM. The first packets both ways
// arm both ends; software cannot arm, and cannot migrate before that. An
// armed QP migrates when software asks (Modify QP to IBV_MIG_MIGRATED), when
// its port goes down, or when its retries run out on a dead primary path,
// and the peer follows when it sees the migrated packets; each end raises
// IBV_EVENT_PATH_MIG, and traffic goes on over the alternate path with
// nothing lost. A migration that cannot happen (the alternate port is down
// too) raises IBV_EVENT_PATH_MIG_ERR. RoCE has no alternate paths.
//
// Port control and the "port down mid-stream" tests need the softverbs
// control interface; the rest runs on any dual-port InfiniBand HCA that
// advertises IBV_DEVICE_AUTO_PATH_MIG.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "conformance/peer_pair.h"
#include "harness/testsupport/device.h"
#include "harness/testsupport/test_config.h"

namespace softverbs::conformance {
namespace {

constexpr auto kEventWait = 10s;

constexpr const char* kNeedsTwoPorts =
    "needs a device with two InfiniBand ports and IBV_DEVICE_AUTO_PATH_MIG "
    "(softverbs: SOFTVERBS_PORTS=2)";

bool device_migrates_paths() {
  Errno err = 0;
  ContextPtr context = open_test_device(err);
  ibv_device_attr attr{};
  if (!context || ibv_query_device(context.get(), &attr)) return false;
  PortAddress port;
  if (query_test_port_address(context.get(), port) != 0) return false;
  return (attr.device_cap_flags & IBV_DEVICE_AUTO_PATH_MIG) && port.alt_port != 0;
}

PairOptions alternate_path_options(uint8_t timeout = 14, uint8_t retry_cnt = 7) {
  RcParameters params;
  params.alternate_path = true;
  params.timeout = timeout;
  params.retry_cnt = retry_cnt;
  return symmetric_options(params);
}

struct PathState {
  ibv_mig_state mig_state = IBV_MIG_MIGRATED;
  uint8_t port_num = 0;
  uint16_t dlid = 0;
  uint8_t alt_port_num = 0;
  uint16_t alt_dlid = 0;
  ibv_qp_state state = IBV_QPS_RESET;
};

PathState path_of(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  EXPECT_EQ(0, ibv_query_qp(qp, &attr,
                            IBV_QP_STATE | IBV_QP_PORT | IBV_QP_AV | IBV_QP_ALT_PATH |
                                IBV_QP_PATH_MIG_STATE,
                            &init));
  return {attr.path_mig_state, attr.port_num,     attr.ah_attr.dlid,
          attr.alt_port_num,   attr.alt_ah_attr.dlid, attr.qp_state};
}

Errno ask_migration_state(ibv_qp* qp, ibv_mig_state state) {
  ibv_qp_attr attr{};
  attr.path_mig_state = state;
  return ibv_modify_qp(qp, &attr, IBV_QP_PATH_MIG_STATE);
}

// A signaled WRITE of [offset, offset + length) to the same place in the peer.
SendSpec write_of(uint64_t wr_id, uint64_t offset, uint32_t length) {
  SendSpec spec;
  spec.wr_id = wr_id;
  spec.opcode = IBV_WR_RDMA_WRITE;
  spec.local_offset = offset;
  spec.remote_offset = offset;
  spec.length = length;
  return spec;
}

// A WRITE and its ACK: the peer sees MigReq = 0 and arms, and its ACK
// arms this end.
void arm(Endpoint& local) {
  local.fill(0, 64, 1);
  ASSERT_EQ(0, local.post_send(write_of(1, 0, 64)));
  std::vector<ibv_wc> wc;
  ASSERT_EQ(0, local.poll(Queue::kSend, 1, wc));
  expect_completion(wc[0], 1, IBV_WC_SUCCESS, "the WRITE that arms");
  ASSERT_EQ(IBV_MIG_ARMED, path_of(local.qp()).mig_state)
      << "the first exchange did not arm the QP";
}

// Streams `count` WRITEs of `length` bytes, calling `midway` when half are
// posted; every byte must arrive.
void stream_writes(Endpoint& local, RemoteEndpoint& remote, uint32_t count, uint32_t length,
                   const std::function<void()>& midway) {
  constexpr uint64_t kSeed = 500;
  for (uint32_t i = 0; i < count; ++i) local.fill(uint64_t(i) * length, length, kSeed + i);
  for (uint32_t i = 0; i < count; ++i) {
    if (i == count / 2) midway();
    ASSERT_EQ(0, local.post_send(write_of(100 + i, uint64_t(i) * length, length)));
  }
  std::vector<ibv_wc> wc;
  ASSERT_EQ(0, local.poll(Queue::kSend, count, wc));
  for (uint32_t i = 0; i < count; ++i)
    expect_completion(wc[i], 100 + i, IBV_WC_SUCCESS, "a WRITE of the stream");
  for (uint32_t i = 0; i < count; ++i) {
    std::optional<ByteMismatch> mismatch;
    ASSERT_EQ(0, remote.check(uint64_t(i) * length, length, kSeed + i, mismatch))
        << remote.why();
    EXPECT_FALSE(mismatch) << "WRITE " << i << " did not arrive whole";
  }
}

void expect_peer_migrated(RemoteEndpoint& remote) {
  std::optional<AsyncEventRecord> event;
  ASSERT_EQ(0, remote.wait_for_async_event(IBV_EVENT_PATH_MIG, kEventWait, event))
      << remote.why();
  EXPECT_TRUE(event) << "the peer raised no IBV_EVENT_PATH_MIG";
}

TEST(PathMigration, AlternatePathIsCheckedAndReadBack) {
  if (!device_migrates_paths()) GTEST_SKIP() << kNeedsTwoPorts;
  with_connected_pair(alternate_path_options(), [](Endpoint& local, RemoteEndpoint&,
                                                   const EndpointInfo& remote_info) {
    const PortAddress& port = local.port();
    const PathState path = path_of(local.qp());
    EXPECT_EQ(IBV_MIG_REARM, path.mig_state);
    EXPECT_EQ(port.port, path.port_num);
    EXPECT_EQ(port.alt_port, path.alt_port_num);
    EXPECT_EQ(remote_info.qp.alt_lid, path.alt_dlid);

    ibv_device_attr device{};
    ASSERT_EQ(0, ibv_query_device(local.context(), &device));
    ibv_qp_attr attr{};
    attr.alt_ah_attr.dlid = remote_info.qp.alt_lid;
    attr.alt_port_num = static_cast<uint8_t>(device.phys_port_cnt + 1);
    attr.alt_ah_attr.port_num = attr.alt_port_num;
    attr.alt_timeout = 14;
    EXPECT_EQ(EINVAL, ibv_modify_qp(local.qp(), &attr, IBV_QP_ALT_PATH))
        << "an alternate port the device does not have";
    attr.alt_port_num = port.alt_port;
    attr.alt_ah_attr.port_num = port.port;
    EXPECT_EQ(EINVAL, ibv_modify_qp(local.qp(), &attr, IBV_QP_ALT_PATH))
        << "alt_port_num differs from alt_ah_attr.port_num (the kernel refuses it)";
    EXPECT_EQ(IBV_QPS_RTS, path_of(local.qp()).state);
  });
}

TEST(PathMigration, SoftwareCannotArmNorMigrateBeforeThePeerRearmed) {
  if (!device_migrates_paths()) GTEST_SKIP() << kNeedsTwoPorts;
  with_connected_pair(alternate_path_options(), [](Endpoint& local, RemoteEndpoint&,
                                                   const EndpointInfo&) {
    EXPECT_EQ(EINVAL, ask_migration_state(local.qp(), IBV_MIG_ARMED))
        << "only the CA arms (IBTA 17.2.8)";
    EXPECT_EQ(EINVAL, ask_migration_state(local.qp(), IBV_MIG_MIGRATED))
        << "Rearm -> Migrated";
    EXPECT_EQ(IBV_MIG_REARM, path_of(local.qp()).mig_state);
    arm(local);
    EXPECT_EQ(EINVAL, ask_migration_state(local.qp(), IBV_MIG_REARM)) << "Armed -> Rearm";
  });
}

TEST(PathMigration, ModifyToMigratedMovesBothEndsToTheAlternatePath) {
  if (!device_migrates_paths()) GTEST_SKIP() << kNeedsTwoPorts;
  with_connected_pair(alternate_path_options(), [](Endpoint& local, RemoteEndpoint& remote,
                                                   const EndpointInfo& remote_info) {
    arm(local);
    ASSERT_EQ(0, ask_migration_state(local.qp(), IBV_MIG_MIGRATED));
    const PathState path = path_of(local.qp());
    EXPECT_EQ(IBV_MIG_MIGRATED, path.mig_state);
    EXPECT_EQ(local.port().alt_port, path.port_num) << "the primary path is the old alternate";
    EXPECT_EQ(remote_info.qp.alt_lid, path.dlid);
    auto migrated = local.wait_for_async_event(IBV_EVENT_PATH_MIG, kEventWait, nullptr);
    EXPECT_TRUE(migrated) << "no IBV_EVENT_PATH_MIG after Modify QP to Migrated";

    stream_writes(local, remote, 8, 4096, [] {});
    expect_peer_migrated(remote);
  });
}

TEST(PathMigration, PortDownMidStreamMigratesAndLosesNothing) {
  if (!device_migrates_paths()) GTEST_SKIP() << kNeedsTwoPorts;
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  const std::string device = test_config().device_name;
  SoftControlReset reset(device);
  // A 1 s local ACK timeout: recovery by timeouts instead of the migration
  // would show in the counters.
  with_connected_pair(alternate_path_options(18), [&](Endpoint& local, RemoteEndpoint& remote,
                                                      const EndpointInfo&) {
    arm(local);
    const std::string port = std::to_string(local.port().port);
    stream_writes(local, remote, 64, 16384, [&] {
      std::string reply;
      ASSERT_EQ(0, soft_control("port " + device + " " + port + " down", reply)) << reply;
    });
    std::vector<AsyncEventRecord> others;
    auto migrated = local.wait_for_async_event(IBV_EVENT_PATH_MIG, kEventWait, &others);
    EXPECT_TRUE(migrated) << "no IBV_EVENT_PATH_MIG when the port went down";
    EXPECT_EQ(local.port().alt_port, path_of(local.qp()).port_num);
    expect_peer_migrated(remote);
    EXPECT_EQ(IBV_QPS_RTS, local.state());
    std::string stats;
    ASSERT_EQ(0, soft_control("stats", stats));
    EXPECT_EQ(0u, qp_counter(stats, local.qp()->qp_num, "retransmit_timeouts").value_or(1))
        << "what was in flight waited for a timeout instead of going out on the new path";
  });
}

TEST(PathMigration, RetriesRunningOutOnADeadPrimaryPathMigrate) {
  if (!device_migrates_paths()) GTEST_SKIP() << kNeedsTwoPorts;
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  // 4 ms local ACK timeout, two retries: the primary path is given up fast.
  with_connected_pair(alternate_path_options(10, 2), [&](Endpoint& local,
                                                         RemoteEndpoint& remote,
                                                         const EndpointInfo&) {
    arm(local);
    // The peer's port 1 goes down in the peer: it migrates at once, and
    // what this end sends to its old LID is lost until this end's retries
    // run out and it migrates too.
    std::string reply;
    ASSERT_EQ(0, remote.control("port " + test_config().device_name + " 1 down", reply))
        << reply;
    expect_peer_migrated(remote);
    stream_writes(local, remote, 4, 4096, [] {});
    auto migrated = local.wait_for_async_event(IBV_EVENT_PATH_MIG, kEventWait, nullptr);
    EXPECT_TRUE(migrated) << "retries ran out on the primary path and no migration followed";
    EXPECT_EQ(IBV_MIG_MIGRATED, path_of(local.qp()).mig_state);
    std::string stats;
    ASSERT_EQ(0, soft_control("stats", stats));
    EXPECT_GE(qp_counter(stats, local.qp()->qp_num, "retransmit_timeouts").value_or(0), 3u)
        << "the migration came before retry_cnt (2) ran out: " << stats;
  });
}

TEST(PathMigration, AlternatePortDownTooRaisesPathMigErr) {
  if (!device_migrates_paths()) GTEST_SKIP() << kNeedsTwoPorts;
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  const std::string device = test_config().device_name;
  SoftControlReset reset(device);
  with_connected_pair(alternate_path_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                                    const EndpointInfo&) {
    arm(local);
    const PortAddress& port = local.port();
    std::string reply;
    ASSERT_EQ(0, soft_control("port " + device + " " + std::to_string(port.alt_port) + " down",
                              reply))
        << reply;
    ASSERT_EQ(0, soft_control("port " + device + " " + std::to_string(port.port) + " down",
                              reply))
        << reply;
    std::vector<AsyncEventRecord> others;
    auto failed = local.wait_for_async_event(IBV_EVENT_PATH_MIG_ERR, kEventWait, &others);
    EXPECT_TRUE(failed) << "no IBV_EVENT_PATH_MIG_ERR";
    for (const AsyncEventRecord& e : others)
      EXPECT_NE(IBV_EVENT_PATH_MIG, e.type) << "migrated to a port that is down";
    const PathState path = path_of(local.qp());
    EXPECT_EQ(IBV_MIG_ARMED, path.mig_state);
    EXPECT_EQ(port.port, path.port_num);

    // The primary port back: the connection goes on where it was.
    ASSERT_EQ(0, soft_control("port " + device + " " + std::to_string(port.port) + " up", reply))
        << reply;
    stream_writes(local, remote, 4, 4096, [] {});
  });
}

TEST(PathMigration, RoceHasNoAlternatePaths) {
  Errno err = 0;
  ContextPtr context = open_test_device(err);
  ASSERT_TRUE(context) << strerror(err);
  PortAddress port;
  ASSERT_EQ(0, query_test_port_address(context.get(), port));
  if (port.link_layer != IBV_LINK_LAYER_ETHERNET) GTEST_SKIP() << "the port is not RoCE";
  with_connected_pair(symmetric_options(), [](Endpoint& local, RemoteEndpoint&,
                                              const EndpointInfo&) {
    ibv_qp_attr attr{};
    attr.alt_ah_attr = address_vector_to(local.port(), {});
    attr.alt_port_num = local.port().port;
    attr.alt_timeout = 14;
    EXPECT_EQ(EINVAL, ibv_modify_qp(local.qp(), &attr, IBV_QP_ALT_PATH))
        << "the kernel refuses alternate paths on RoCE ports";
  });
}

}  // namespace
}  // namespace softverbs::conformance
