// rdma_bind_addr(3) and rdma_listen(3): binding the test address attaches
// the device that owns it and takes a port in the id's port space; a port
// already bound (by another process) or an address no interface has is
// refused; a listen takes any backlog. Kernel behaviour:
// docs/rdmacm-kernel-reference.md §3.3, §3.8.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>

#include "conformance/cm/cm_handles.h"
#include "conformance/cm/cm_sides.h"
#include "conformance/cm/cm_test_config.h"
#include "conformance/cm/forked_peer.h"

namespace softverbs::conformance::cm {
namespace {

constexpr const char* kUnownedAddress = "203.0.113.1";

enum BindStep : uint32_t { kBound = 1, kChecked = 2 };

int bind_to(rdma_cm_id* id, sockaddr_in address) {
  return rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&address));
}

// A loopback address binds like the any address in the kernel's CM, so a
// conflict on it is EADDRNOTAVAIL (cma_check_port), as with 0.0.0.0.
int expected_conflict_errno() { return test_address_is_loopback() ? EADDRNOTAVAIL : EADDRINUSE; }

TEST(CmAddress, BindToTheTestAddressTakesAPort) {
  run_in_fresh_process([] {
    CmId id = make_id(nullptr, RDMA_PS_TCP);
    ASSERT_TRUE(id);
    ASSERT_EQ(0, bind_to(id.get(), test_address(0))) << strerror(errno);
    EXPECT_NE(0, local_port(id.get()));
    const auto* local = reinterpret_cast<const sockaddr_in*>(rdma_get_local_addr(id.get()));
    EXPECT_EQ(test_address().sin_addr.s_addr, local->sin_addr.s_addr);
    // The kernel attaches the owning device, except to a loopback bind,
    // which it treats as the any address (observed on rxe: verbs NULL).
    if (test_address_is_loopback()) {
      EXPECT_EQ(nullptr, id->verbs);
    } else {
      EXPECT_NE(nullptr, id->verbs);
    }
  });
}

TEST(CmAddress, BindToAnAddressNoInterfaceHasFailsWithEaddrnotavail) {
  run_in_fresh_process([] {
    CmId id = make_id(nullptr, RDMA_PS_TCP);
    ASSERT_TRUE(id);
    sockaddr_in address;
    ASSERT_TRUE(make_ipv4(kUnownedAddress, 0, address));
    EXPECT_EQ(-1, bind_to(id.get(), address));
    EXPECT_EQ(EADDRNOTAVAIL, errno) << strerror(errno);
    EXPECT_EQ(nullptr, id->verbs);
  });
}

TEST(CmAddress, SecondBindOfOneIdIsInvalid) {
  run_in_fresh_process([] {
    CmId id = make_id(nullptr, RDMA_PS_TCP);
    ASSERT_TRUE(id);
    ASSERT_EQ(0, bind_to(id.get(), test_address(0))) << strerror(errno);
    EXPECT_EQ(-1, bind_to(id.get(), test_address(0)));
    EXPECT_EQ(EINVAL, errno) << strerror(errno);
  });
}

// The other process holds `port` of the TCP space; this one tries it.
void expect_port_taken(uint16_t port) {
  CmId same = make_id(nullptr, RDMA_PS_TCP);
  ASSERT_TRUE(same);
  EXPECT_EQ(-1, bind_to(same.get(), test_address(port)));
  EXPECT_EQ(expected_conflict_errno(), errno) << strerror(errno);

  CmId any = make_id(nullptr, RDMA_PS_TCP);
  ASSERT_TRUE(any);
  sockaddr_in any_address;
  ASSERT_TRUE(make_ipv4("0.0.0.0", port, any_address));
  EXPECT_EQ(-1, bind_to(any.get(), any_address));
  EXPECT_EQ(EADDRNOTAVAIL, errno) << "any address against a bound one: " << strerror(errno);

  // Port spaces are separate: the same port of the UDP space is free.
  CmId udp = make_id(nullptr, RDMA_PS_UDP);
  ASSERT_TRUE(udp);
  EXPECT_EQ(0, bind_to(udp.get(), test_address(port))) << strerror(errno);
}

TEST(CmAddress, PortBoundInAnotherProcessIsInUse) {
  run_in_fresh_process([] {
    ForkedPeer holder("port holder", [](PeerLink& link) {
      CmId id = make_id(nullptr, RDMA_PS_TCP);
      ASSERT_TRUE(id);
      ASSERT_EQ(0, bind_to(id.get(), test_address(0))) << strerror(errno);
      const uint16_t port = local_port(id.get());
      ASSERT_TRUE(link.signal(kBound));
      ASSERT_TRUE(link.send(port));
      ASSERT_TRUE(link.wait_for(kChecked));
    });
    uint16_t port = 0;
    ASSERT_TRUE(holder.link().wait_for(kBound));
    ASSERT_TRUE(holder.link().receive(port));
    expect_port_taken(port);
    ASSERT_TRUE(holder.link().signal(kChecked));
    EXPECT_TRUE(holder.join());
  });
}

TEST(CmAddress, ListenTakesAnyBacklog) {
  run_in_fresh_process([] {
    // The kernel caps the backlog (0 and anything above
    // net.rdma_ucm.max_backlog mean the maximum); none is an error.
    for (int backlog : {0, 1, 5000}) {
      CmId id = make_id(nullptr, RDMA_PS_TCP);
      ASSERT_TRUE(id);
      ASSERT_EQ(0, bind_to(id.get(), test_address(0))) << strerror(errno);
      EXPECT_EQ(0, rdma_listen(id.get(), backlog)) << "backlog " << backlog << ": "
                                                   << strerror(errno);
    }
  });
}

TEST(CmAddress, ListenTwiceIsInvalid) {
  run_in_fresh_process([] {
    CmId id = make_id(nullptr, RDMA_PS_TCP);
    ASSERT_TRUE(id);
    ASSERT_EQ(0, bind_to(id.get(), test_address(0))) << strerror(errno);
    ASSERT_EQ(0, rdma_listen(id.get(), 0)) << strerror(errno);
    EXPECT_EQ(-1, rdma_listen(id.get(), 0));
    EXPECT_EQ(EINVAL, errno) << strerror(errno);
  });
}

// Observed on rxe: a listen on an id never bound binds it to the any
// address and a port the CM chooses; the id has no device.
TEST(CmAddress, ListenWithoutBindTakesAnEphemeralPortOnTheAnyAddress) {
  run_in_fresh_process([] {
    CmId id = make_id(nullptr, RDMA_PS_TCP);
    ASSERT_TRUE(id);
    ASSERT_EQ(0, rdma_listen(id.get(), 0)) << strerror(errno);
    EXPECT_NE(0, local_port(id.get()));
    const auto* local = reinterpret_cast<const sockaddr_in*>(rdma_get_local_addr(id.get()));
    EXPECT_EQ(AF_INET, local->sin_family);
    EXPECT_EQ(htonl(INADDR_ANY), local->sin_addr.s_addr);
    EXPECT_EQ(nullptr, id->verbs);
  });
}

}  // namespace
}  // namespace softverbs::conformance::cm
