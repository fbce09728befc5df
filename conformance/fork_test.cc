// fork() after memory registration (ibv_fork_init(3), ibv_is_fork_initialized):
// the status is one of the three the man page names, and whatever it is,
// a child may touch memory that is not registered, the parent's RDMA keeps
// working after the fork, and what a peer writes lands in the parent's
// memory, not in a copy. Where fork protection is unneeded (a kernel that
// copies pinned pages at fork, or a soft device, which pins nothing) the
// child may also read and write registered memory: it gets its own copy,
// and nothing it writes reaches the parent.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "conformance/peer_pair.h"

namespace softverbs::conformance {
namespace {

constexpr uint64_t kLength = 8192;
constexpr uint64_t kWrittenByPeer = 64 * 1024;  // the peer WRITEs here after the fork
constexpr uint64_t kReadBack = 128 * 1024;      // the parent READs the peer's data here
constexpr uint8_t kChildByte = 0xee;
constexpr uint64_t kSeed = 21;

// Whether the system's library reaches any device that is not soft.
bool other_devices_present() {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  bool found = false;
  for (int i = 0; list && i < count; ++i)
    if (std::strncmp(ibv_get_device_name(list[i]), "softverbs", 9) != 0) found = true;
  if (list) ibv_free_device_list(list);
  return found;
}

// The child: reads and writes `scratch` (never registered) and, when
// `touch_registered`, `registered` too. Exits 0 when what it read was what
// the parent had there. No verbs are called in the child.
[[noreturn]] void child_body(std::vector<uint8_t>& scratch, uint8_t* registered,
                             uint8_t expected_first, bool touch_registered) {
  bool ok = scratch[0] == 1;
  std::memset(scratch.data(), 2, scratch.size());
  if (touch_registered) {
    ok = ok && registered[0] == expected_first;
    std::memset(registered, kChildByte, kLength);
  }
  _exit(ok ? 0 : 1);
}

TEST(Fork, ChildTouchesMemoryAndParentRdmaKeepsLandingInParentMemory) {
  with_connected_pair(symmetric_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                               const EndpointInfo&) {
    const ibv_fork_status status = ibv_is_fork_initialized();
    ASSERT_TRUE(status == IBV_FORK_DISABLED || status == IBV_FORK_ENABLED ||
                status == IBV_FORK_UNNEEDED)
        << "status " << status;
    if (soft_control_available() && !other_devices_present()) {
      // Shared MR pages too are copied for the child at the fork, as the
      // kernel copies pinned pages since 5.13.
      EXPECT_EQ(IBV_FORK_UNNEEDED, status) << "a soft device gives a child a copy";
      EXPECT_EQ(0, ibv_fork_init()) << "registrations made already do not matter";
      EXPECT_EQ(IBV_FORK_UNNEEDED, ibv_is_fork_initialized());
    }
    const bool touch_registered = status == IBV_FORK_UNNEEDED;

    local.fill(0, kLength, kSeed);
    std::vector<uint8_t> scratch(4096, 1);
    uint8_t* registered = local.buffer().data();
    const uint8_t first = registered[0];
    const pid_t child = fork();
    ASSERT_NE(-1, child) << std::strerror(errno);
    if (child == 0) child_body(scratch, registered, first, touch_registered);
    int wstatus = 0;
    ASSERT_EQ(child, waitpid(child, &wstatus, 0));
    ASSERT_TRUE(WIFEXITED(wstatus)) << "the child died of signal "
                                    << (WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0);
    EXPECT_EQ(0, WEXITSTATUS(wstatus)) << "the child read other bytes than the parent had";
    EXPECT_EQ(1, scratch[0]) << "the child's write reached the parent";
    auto kept = local.check(0, kLength, kSeed);
    EXPECT_FALSE(kept) << "the child's write to registered memory reached the parent: "
                       << describe_mismatch(*kept);

    // The peer writes into the parent's registered memory after the fork.
    ASSERT_EQ(0, remote.fill(0, kLength, kSeed + 1)) << remote.why();
    SendSpec write;
    write.wr_id = 1;
    write.opcode = IBV_WR_RDMA_WRITE;
    write.length = kLength;
    write.remote_offset = kWrittenByPeer;
    ASSERT_EQ(0, remote.post_send(write)) << remote.why();
    std::vector<ibv_wc> done;
    ASSERT_EQ(0, remote.poll(Queue::kSend, 1, done)) << remote.why();
    expect_completion(done[0], 1, IBV_WC_SUCCESS, "the peer's WRITE after the fork");
    auto landed = local.check(kWrittenByPeer, kLength, kSeed + 1);
    EXPECT_FALSE(landed) << "the peer's WRITE: " << describe_mismatch(*landed);

    // And the parent's own READ places into its memory.
    SendSpec read;
    read.wr_id = 2;
    read.opcode = IBV_WR_RDMA_READ;
    read.length = kLength;
    read.local_offset = kReadBack;
    ASSERT_EQ(0, local.post_send(read));
    done.clear();
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, done));
    expect_completion(done[0], 2, IBV_WC_SUCCESS, "the parent's READ after the fork");
    auto read_back = local.check(kReadBack, kLength, kSeed + 1);
    EXPECT_FALSE(read_back) << "the parent's READ: " << describe_mismatch(*read_back);
  });
}

}  // namespace
}  // namespace softverbs::conformance
