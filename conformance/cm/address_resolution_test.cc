// rdma_resolve_addr(3) and rdma_resolve_route(3): resolving the test
// address gives ADDR_RESOLVED, which binds the id to the device that owns
// the address, then ROUTE_RESOLVED with one path; an address no RDMA device
// can reach fails. Kernel behaviour: docs/rdmacm-kernel-reference.md §3.4,
// §3.5.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "conformance/cm/cm_events.h"
#include "conformance/cm/cm_handles.h"
#include "conformance/cm/cm_test_config.h"
#include "conformance/cm/forked_peer.h"

namespace softverbs::conformance::cm {
namespace {

constexpr uint16_t kDestinationPort = 7471;  // resolution needs no listener
// TEST-NET-3 (RFC 5737): no interface here has it.
constexpr const char* kUnownedAddress = "203.0.113.1";

// The RoCE GID of an IPv4 address: ::ffff:a.b.c.d.
ibv_gid ipv4_gid(in_addr address) {
  ibv_gid gid{};
  gid.raw[10] = gid.raw[11] = 0xff;
  std::memcpy(gid.raw + 12, &address, sizeof address);
  return gid;
}

// On an Ethernet (RoCE) port the device owning an address has its GID; on
// an InfiniBand port GIDs are not addresses, and this says yes.
::testing::AssertionResult owns_test_address(ibv_context* context, uint8_t port) {
  ibv_port_attr attr{};
  if (ibv_query_port(context, port, &attr) != 0)
    return ::testing::AssertionFailure() << "ibv_query_port: " << strerror(errno);
  if (attr.link_layer != IBV_LINK_LAYER_ETHERNET) return ::testing::AssertionSuccess();
  const ibv_gid wanted = ipv4_gid(test_address().sin_addr);
  constexpr int kGidsScanned = 16;
  for (int index = 0; index < attr.gid_tbl_len && index < kGidsScanned; ++index) {
    ibv_gid gid{};
    if (ibv_query_gid(context, port, index, &gid) == 0 &&
        std::memcmp(gid.raw, wanted.raw, sizeof gid.raw) == 0)
      return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << ibv_get_device_name(context->device) << " port "
                                       << int(port) << " has no GID ::ffff:"
                                       << test_address_text();
}

::testing::AssertionResult is_test_address(const sockaddr* address, uint16_t port) {
  const sockaddr_in expected = test_address(port);
  const auto* in = reinterpret_cast<const sockaddr_in*>(address);
  if (address == nullptr || address->sa_family != AF_INET ||
      in->sin_addr.s_addr != expected.sin_addr.s_addr || (port != 0 && in->sin_port != htons(port)))
    return ::testing::AssertionFailure() << describe_address(address) << ", expected "
                                         << describe_address(
                                                reinterpret_cast<const sockaddr*>(&expected));
  return ::testing::AssertionSuccess();
}

// A channel and an id with ADDR_RESOLVED to the test address.
void resolve_address(Channel& channel, CmId& id) {
  channel = make_channel();
  ASSERT_TRUE(channel);
  id = make_id(channel.get(), RDMA_PS_TCP);
  ASSERT_TRUE(id);
  sockaddr_in destination = test_address(kDestinationPort);
  ASSERT_EQ(0, rdma_resolve_addr(id.get(), nullptr, reinterpret_cast<sockaddr*>(&destination),
                                 2000))
      << strerror(errno);
  CmEvent event = next_event(channel.get());
  ASSERT_TRUE(is_event(event, RDMA_CM_EVENT_ADDR_RESOLVED));
  EXPECT_EQ(id.get(), event.id);
  EXPECT_EQ(nullptr, event.listen_id);
}

TEST(CmAddress, ResolveAddrBindsTheIdToTheDeviceOwningTheAddress) {
  run_in_fresh_process([] {
    Channel channel;
    CmId id;
    ASSERT_NO_FATAL_FAILURE(resolve_address(channel, id));
    ASSERT_NE(nullptr, id->verbs) << "ADDR_RESOLVED left the id without a device";
    EXPECT_NE(nullptr, id->pd);
    EXPECT_GE(id->port_num, 1);
    if (!test_address_is_loopback()) {
      EXPECT_TRUE(owns_test_address(id->verbs, id->port_num));
    }
  });
}

TEST(CmAddress, ResolvedIdReportsItsAddressesAndPorts) {
  run_in_fresh_process([] {
    Channel channel;
    CmId id;
    ASSERT_NO_FATAL_FAILURE(resolve_address(channel, id));
    // The destination is local, so the source the route picks is the same
    // address, with a port the CM chose.
    EXPECT_TRUE(is_test_address(rdma_get_local_addr(id.get()), 0));
    EXPECT_TRUE(is_test_address(rdma_get_peer_addr(id.get()), kDestinationPort));
    EXPECT_NE(0, rdma_get_src_port(id.get()));
    EXPECT_EQ(reinterpret_cast<sockaddr_in*>(rdma_get_local_addr(id.get()))->sin_port,
              rdma_get_src_port(id.get()));
    EXPECT_EQ(htons(kDestinationPort), rdma_get_dst_port(id.get()));
  });
}

TEST(CmAddress, ResolveRouteAfterAddrGivesOnePath) {
  run_in_fresh_process([] {
    Channel channel;
    CmId id;
    ASSERT_NO_FATAL_FAILURE(resolve_address(channel, id));
    ASSERT_EQ(0, rdma_resolve_route(id.get(), 2000)) << strerror(errno);
    CmEvent event = next_event(channel.get());
    ASSERT_TRUE(is_event(event, RDMA_CM_EVENT_ROUTE_RESOLVED));
    EXPECT_EQ(id.get(), event.id);
    ASSERT_EQ(1, id->route.num_paths);
    ASSERT_NE(nullptr, id->route.path_rec);
    ibv_port_attr port{};
    ASSERT_EQ(0, ibv_query_port(id->verbs, id->port_num, &port));
    if (port.link_layer == IBV_LINK_LAYER_ETHERNET) {
      // RoCE: the path's GIDs are the addresses' (kernel reference §3.5).
      const ibv_gid gid = ipv4_gid(test_address().sin_addr);
      EXPECT_EQ(0, std::memcmp(gid.raw, id->route.path_rec->dgid.raw, sizeof gid.raw));
      EXPECT_EQ(0, std::memcmp(gid.raw, id->route.path_rec->sgid.raw, sizeof gid.raw));
    }
  });
}

TEST(CmAddress, ResolvingAgainIsInvalid) {
  run_in_fresh_process([] {
    Channel channel;
    CmId id;
    ASSERT_NO_FATAL_FAILURE(resolve_address(channel, id));
    sockaddr_in destination = test_address(kDestinationPort);
    EXPECT_EQ(-1, rdma_resolve_addr(id.get(), nullptr, reinterpret_cast<sockaddr*>(&destination),
                                    2000));
    EXPECT_EQ(EINVAL, errno);
    ASSERT_EQ(0, rdma_resolve_route(id.get(), 2000)) << strerror(errno);
    ASSERT_TRUE(is_event(next_event(channel.get()), RDMA_CM_EVENT_ROUTE_RESOLVED));
    EXPECT_EQ(-1, rdma_resolve_route(id.get(), 2000));
    EXPECT_EQ(EINVAL, errno);
  });
}

TEST(CmAddress, SynchronousIdResolvesInTheCall) {
  run_in_fresh_process([] {
    CmId id = make_id(nullptr, RDMA_PS_TCP);  // no channel: every call waits for its event
    ASSERT_TRUE(id);
    sockaddr_in destination = test_address(kDestinationPort);
    ASSERT_EQ(0, rdma_resolve_addr(id.get(), nullptr, reinterpret_cast<sockaddr*>(&destination),
                                   2000))
        << strerror(errno);
    EXPECT_NE(nullptr, id->verbs);
    ASSERT_EQ(0, rdma_resolve_route(id.get(), 2000)) << strerror(errno);
    EXPECT_EQ(1, id->route.num_paths);
  });
}

// Whether this host's routing table reaches `address` (a default route
// does): a RoCE device on the route's interface then reaches it too, on
// rxe as on softverbs, and the address is no longer unreachable.
bool host_routes_to(const char* address) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(kDestinationPort);
  if (inet_pton(AF_INET, address, &to.sin_addr) != 1) return false;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const bool routed = fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0;
  if (fd >= 0) close(fd);
  return routed;
}

// Asked in a child of its own: the test process opens no device before the
// processes it forks do.
bool first_device_is_roce() {
  const pid_t child = fork();
  if (child == 0) {
    int count = 0;
    ibv_device** devices = ibv_get_device_list(&count);
    bool roce = false;
    if (devices && count > 0) {
      if (ibv_context* context = ibv_open_device(devices[0])) {
        ibv_port_attr port{};
        roce = ibv_query_port(context, 1, &port) == 0 &&
               port.link_layer == IBV_LINK_LAYER_ETHERNET;
        ibv_close_device(context);
      }
    }
    _exit(roce ? 1 : 0);
  }
  int status = 0;
  return child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
         WEXITSTATUS(status) == 1;
}

// rxe (kernel 6.1): with no route to the destination the call itself fails
// with ENETUNREACH (rdma_resolve_ip finds no route) and no event follows.
// Where a route exists through an interface no RDMA device is on, the
// kernel instead reports ADDR_ERROR with a negative errno (-ENODEV when no
// device owns the source, -ETIMEDOUT when the neighbour never answers).
TEST(CmAddress, ResolvingAnAddressNoDeviceReachesFails) {
  if (host_routes_to(kUnownedAddress) && first_device_is_roce())
    GTEST_SKIP() << "this host has a route to " << kUnownedAddress
                 << " (a default route), so a RoCE device reaches it";
  run_in_fresh_process([] {
    Channel channel = make_channel();
    ASSERT_TRUE(channel);
    CmId id = make_id(channel.get(), RDMA_PS_TCP);
    ASSERT_TRUE(id);
    sockaddr_in destination;
    ASSERT_TRUE(make_ipv4(kUnownedAddress, kDestinationPort, destination));
    const int rc = rdma_resolve_addr(id.get(), nullptr, reinterpret_cast<sockaddr*>(&destination),
                                     2000);
    if (rc != 0) {
      EXPECT_EQ(ENETUNREACH, errno) << strerror(errno);
      EXPECT_TRUE(no_event_within(channel.get(), 500ms));
    } else {
      CmEvent event = next_event(channel.get());
      ASSERT_TRUE(event.received);
      EXPECT_EQ(RDMA_CM_EVENT_ADDR_ERROR, event.type) << event.describe();
      EXPECT_TRUE(event.status == -ENODEV || event.status == -ETIMEDOUT ||
                  event.status == -EHOSTUNREACH || event.status == -ENETUNREACH)
          << event.describe();
    }
    EXPECT_EQ(nullptr, id->verbs);
  });
}

}  // namespace
}  // namespace softverbs::conformance::cm
