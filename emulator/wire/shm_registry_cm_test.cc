// The registry's table of connection-manager port bindings: the kernel's
// rules for who may bind a port (cma_check_port), ephemeral ports, port
// spaces kept apart, which listener a connection reaches, and a killed
// process's bindings reclaimed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <random>
#include <set>
#include <vector>

#include "emulator/wire/shm_registry.h"
#include "emulator/wire/wire_test_support.h"

namespace softverbs {
namespace {

using testing::fork_child;
using testing::Pipe;

// RDMA_PS_* of rdma_cma.h.
constexpr uint16_t kPsIpoib = 0x0002;
constexpr uint16_t kPsTcp = 0x0106;
constexpr uint16_t kPsUdp = 0x0111;
constexpr uint16_t kPsIb = 0x013F;

constexpr Gid kAny{};

// ::ffff:192.0.2.<host> (TEST-NET-1)
Gid ipv4(uint8_t host) {
  Gid gid{};
  gid[10] = 0xff;
  gid[11] = 0xff;
  gid[12] = 192;
  gid[13] = 0;
  gid[14] = 2;
  gid[15] = host;
  return gid;
}

// The registry segment mapped as plain memory, to look at the table or
// write it as no bind would.
class RawRegistry {
 public:
  RawRegistry() {
    const int fd = shm_open(ShmRegistry::segment_name().c_str(), O_RDWR, 0);
    if (fd < 0) return;
    void* address =
        mmap(nullptr, sizeof(RegistryLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (address != MAP_FAILED) layout_ = static_cast<RegistryLayout*>(address);
  }
  ~RawRegistry() {
    if (layout_) munmap(layout_, sizeof(RegistryLayout));
  }
  RawRegistry(const RawRegistry&) = delete;
  RawRegistry& operator=(const RawRegistry&) = delete;

  RegistryLayout* layout() const { return layout_; }
  uint32_t bindings_of(uint32_t slot) const {
    uint32_t count = 0;
    for (const RegistryCmBinding& entry : layout_->cm_bindings) count += entry.owner == slot + 1;
    return count;
  }

 private:
  RegistryLayout* layout_ = nullptr;
};

class ShmRegistryCm : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = attach();
    ASSERT_TRUE(registry_);
  }
  void TearDown() override {
    registry_.reset();
    testing::remove_segments_of_current_prefix();
  }
  static std::unique_ptr<ShmRegistry> attach() {
    Errno err = 0;
    auto registry = ShmRegistry::attach(err);
    EXPECT_TRUE(registry) << err;
    return registry;
  }
  // Binds an explicit port; the errno, and the handle through `handle`.
  static Errno bind(ShmRegistry& registry, uint16_t space, const Gid& address, uint16_t port,
                    uint32_t* handle = nullptr, uint32_t agent_qpn = 2) {
    uint32_t ignored = 0;
    return registry.bind_cm_port(space, address, port, agent_qpn, handle ? *handle : ignored);
  }
  bool listener(uint16_t space, uint16_t port, const Gid& address,
                ShmRegistry::CmBinding* found = nullptr) const {
    ShmRegistry::CmBinding ignored;
    return registry_->find_cm_listener(space, port, address, found ? *found : ignored);
  }

  testing::ScopedShmPrefix prefix_;
  testing::Watchdog watchdog_{120};
  std::unique_ptr<ShmRegistry> registry_;
};

TEST_F(ShmRegistryCm, AnExplicitPortIsKeptAndPortZeroPicksAnEphemeralOne) {
  uint16_t port = 7471;
  uint32_t explicit_handle = 0;
  ASSERT_EQ(0, registry_->bind_cm_port(kPsTcp, kAny, port, 2, explicit_handle));
  EXPECT_EQ(7471, port);
  uint16_t ephemeral = 0;
  uint32_t ephemeral_handle = 0;
  ASSERT_EQ(0, registry_->bind_cm_port(kPsTcp, kAny, ephemeral, 2, ephemeral_handle));
  EXPECT_GE(ephemeral, ShmRegistry::kFirstEphemeralCmPort);
  EXPECT_LE(ephemeral, ShmRegistry::kLastEphemeralCmPort);
  EXPECT_NE(explicit_handle, ephemeral_handle);
  EXPECT_EQ(EADDRNOTAVAIL, bind(*registry_, kPsTcp, kAny, ephemeral)) << "the port is held";
}

TEST_F(ShmRegistryCm, EphemeralPortsStartAtRandom) {
  std::set<uint16_t> picked;
  for (int i = 0; i < 8; ++i) {
    uint16_t port = 0;
    uint32_t handle = 0;
    ASSERT_EQ(0, registry_->bind_cm_port(kPsUdp, kAny, port, 2, handle));
    picked.insert(port);
    registry_->release_cm_port(handle);  // the same port would be free again
  }
  EXPECT_GT(picked.size(), 1u);
}

TEST_F(ShmRegistryCm, AnEphemeralPortIsOneNoAddressOfItsSpaceUses) {
  // As the kernel's cma_alloc_any_port: ports bound on other addresses are
  // passed over too, so every ephemeral bind here gets its own port.
  std::set<uint16_t> picked;
  for (uint8_t host = 1; host <= 200; ++host) {
    uint16_t port = 0;
    uint32_t handle = 0;
    ASSERT_EQ(0, registry_->bind_cm_port(kPsTcp, ipv4(host), port, 2, handle));
    EXPECT_TRUE(picked.insert(port).second) << port;
  }
}

TEST_F(ShmRegistryCm, APortConflictsOnTheSameAddressOrWhenEitherIsTheAnyAddress) {
  auto other = attach();  // another slot: another process as the registry sees it
  ASSERT_TRUE(other);
  ASSERT_EQ(0, bind(*registry_, kPsTcp, ipv4(1), 7000));
  // cma_check_port: EADDRINUSE on the same address, EADDRNOTAVAIL with the any address.
  EXPECT_EQ(EADDRINUSE, bind(*other, kPsTcp, ipv4(1), 7000));
  EXPECT_EQ(EADDRINUSE, bind(*registry_, kPsTcp, ipv4(1), 7000)) << "this process included";
  EXPECT_EQ(EADDRNOTAVAIL, bind(*other, kPsTcp, kAny, 7000));
  EXPECT_EQ(0, bind(*other, kPsTcp, ipv4(2), 7000)) << "another address";

  ASSERT_EQ(0, bind(*registry_, kPsTcp, kAny, 7001));
  EXPECT_EQ(EADDRNOTAVAIL, bind(*other, kPsTcp, ipv4(3), 7001));
  EXPECT_EQ(EADDRNOTAVAIL, bind(*other, kPsTcp, kAny, 7001));
}

TEST_F(ShmRegistryCm, MappedIpv4AnyIsTheAnyAddress) {
  const Gid mapped_any = [] {
    Gid gid{};
    gid[10] = gid[11] = 0xff;
    return gid;
  }();
  ASSERT_EQ(0, bind(*registry_, kPsTcp, ipv4(1), 7002));
  EXPECT_EQ(EADDRNOTAVAIL, bind(*registry_, kPsTcp, mapped_any, 7002));
  uint32_t handle = 0;
  ASSERT_EQ(0, bind(*registry_, kPsTcp, mapped_any, 7003, &handle));
  ASSERT_EQ(0, registry_->listen_cm_port(handle));
  ShmRegistry::CmBinding found;
  ASSERT_TRUE(listener(kPsTcp, 7003, ipv4(9), &found));
  EXPECT_EQ(kAny, found.address);
}

TEST_F(ShmRegistryCm, PortSpacesNeverConflict) {
  auto other = attach();
  ASSERT_TRUE(other);
  ASSERT_EQ(0, bind(*registry_, kPsTcp, kAny, 7010));
  for (uint16_t space : {kPsUdp, kPsIb, kPsIpoib}) {
    EXPECT_EQ(0, bind(*other, space, kAny, 7010)) << space;
    EXPECT_EQ(EADDRNOTAVAIL, bind(*other, space, kAny, 7010)) << space << " is held now";
  }
}

TEST_F(ShmRegistryCm, OnlyListeningBindingsAreFoundWithWhatTheyHold) {
  uint32_t handle = 0;
  ASSERT_EQ(0, bind(*registry_, kPsTcp, ipv4(1), 7020, &handle, 77));
  EXPECT_FALSE(listener(kPsTcp, 7020, ipv4(1))) << "bound, not listening";
  ASSERT_EQ(0, registry_->listen_cm_port(handle));
  ASSERT_EQ(0, registry_->listen_cm_port(handle)) << "idempotent";
  ShmRegistry::CmBinding found;
  ASSERT_TRUE(listener(kPsTcp, 7020, ipv4(1), &found));
  EXPECT_EQ(kPsTcp, found.port_space);
  EXPECT_EQ(7020, found.port);
  EXPECT_EQ(ipv4(1), found.address);
  EXPECT_EQ(77u, found.agent_qpn);
  EXPECT_TRUE(found.listening);
  EXPECT_EQ(registry_->self().slot, found.slot);
  EXPECT_EQ(registry_->self().generation, found.generation);
  EXPECT_FALSE(listener(kPsTcp, 7020, ipv4(2))) << "another address";
  EXPECT_FALSE(listener(kPsTcp, 7021, ipv4(1))) << "another port";
  EXPECT_FALSE(listener(kPsUdp, 7020, ipv4(1))) << "another port space";
}

TEST_F(ShmRegistryCm, AListenerOnTheAnyAddressTakesEveryAddress) {
  uint32_t handle = 0;
  ASSERT_EQ(0, bind(*registry_, kPsIb, kAny, 7030, &handle, 55));
  ASSERT_EQ(0, registry_->listen_cm_port(handle));
  ShmRegistry::CmBinding found;
  for (const Gid& address : {ipv4(1), ipv4(200), kAny}) {
    ASSERT_TRUE(listener(kPsIb, 7030, address, &found));
    EXPECT_EQ(55u, found.agent_qpn);
  }
}

TEST_F(ShmRegistryCm, AListenerOnTheExactAddressWinsOverOneOnTheAnyAddress) {
  auto other = attach();
  ASSERT_TRUE(other);
  uint32_t exact = 0;
  ASSERT_EQ(0, bind(*registry_, kPsTcp, ipv4(1), 7040, &exact, 11));
  ASSERT_EQ(0, registry_->listen_cm_port(exact));
  // bind never lets an any-address binding share the port with it, so the
  // any-address listener of the other process is written into the table.
  RawRegistry raw;
  ASSERT_TRUE(raw.layout());
  RegistryCmBinding& entry = raw.layout()->cm_bindings[kMaxCmBindings - 1];
  ASSERT_EQ(0, entry.owner);
  entry = RegistryCmBinding{{}, 22, kPsTcp, 7040, 1, static_cast<uint8_t>(other->self().slot + 1)};

  ShmRegistry::CmBinding found;
  ASSERT_TRUE(listener(kPsTcp, 7040, ipv4(1), &found));
  EXPECT_EQ(11u, found.agent_qpn) << "the exact address wins";
  ASSERT_TRUE(listener(kPsTcp, 7040, ipv4(2), &found));
  EXPECT_EQ(22u, found.agent_qpn) << "only the any address takes this one";
  EXPECT_EQ(other->self().slot, found.slot);
  registry_->release_cm_port(exact);
  ASSERT_TRUE(listener(kPsTcp, 7040, ipv4(1), &found));
  EXPECT_EQ(22u, found.agent_qpn) << "the any address takes over";
}

TEST_F(ShmRegistryCm, ReleaseFreesThePortAndHandlesNotOursChangeNothing) {
  auto other = attach();
  ASSERT_TRUE(other);
  uint32_t ours = 0;
  uint32_t theirs = 0;
  ASSERT_EQ(0, bind(*registry_, kPsTcp, kAny, 7050, &ours));
  ASSERT_EQ(0, registry_->listen_cm_port(ours));
  ASSERT_EQ(0, bind(*other, kPsTcp, kAny, 7051, &theirs));
  ASSERT_EQ(0, other->listen_cm_port(theirs));

  EXPECT_EQ(EINVAL, registry_->listen_cm_port(theirs));
  EXPECT_EQ(EINVAL, registry_->listen_cm_port(kMaxCmBindings));
  registry_->release_cm_port(theirs);
  registry_->release_cm_port(kMaxCmBindings);
  EXPECT_TRUE(listener(kPsTcp, 7051, kAny)) << "another process's binding stays";
  EXPECT_EQ(EADDRNOTAVAIL, bind(*registry_, kPsTcp, kAny, 7051));

  registry_->release_cm_port(ours);
  EXPECT_FALSE(listener(kPsTcp, 7050, kAny));
  EXPECT_EQ(EINVAL, registry_->listen_cm_port(ours)) << "released";
  EXPECT_EQ(0, bind(*other, kPsTcp, kAny, 7050)) << "the port is free again";
}

TEST_F(ShmRegistryCm, AFullTableRefusesWithEnomem) {
  std::vector<uint32_t> handles(kMaxCmBindings);
  for (uint32_t i = 0; i < kMaxCmBindings; ++i)
    ASSERT_EQ(0, bind(*registry_, kPsTcp, kAny, static_cast<uint16_t>(1000 + i), &handles[i]));
  EXPECT_EQ(ENOMEM, bind(*registry_, kPsUdp, kAny, 5000));
  uint16_t port = 0;
  uint32_t handle = 0;
  EXPECT_EQ(ENOMEM, registry_->bind_cm_port(kPsTcp, kAny, port, 2, handle));
  EXPECT_EQ(EADDRNOTAVAIL, bind(*registry_, kPsTcp, kAny, 1000)) << "the conflict is told first";
  registry_->release_cm_port(handles[5]);
  ASSERT_EQ(0, bind(*registry_, kPsUdp, kAny, 5000, &handle));
  EXPECT_EQ(handles[5], handle) << "the freed entry is reused";
}

TEST_F(ShmRegistryCm, AKilledListenersBindingIsReclaimedAndItsPortBoundAgain) {
  struct Report {
    uint32_t slot;
    uint32_t handle;
  };
  // Holds the table's first entry while the child binds, so that the child's
  // entry is not the first free one when this process binds again below.
  uint32_t placeholder = 0;
  ASSERT_EQ(0, bind(*registry_, kPsUdp, kAny, 1, &placeholder));
  Pipe report;
  const pid_t child = fork_child([&] {
    Errno err = 0;
    auto registry = ShmRegistry::attach(err);
    if (!registry) return 1;
    uint16_t port = 7777;
    uint32_t handle = 0;
    if (registry->bind_cm_port(kPsTcp, ipv4(9), port, 99, handle) != 0) return 2;
    if (registry->listen_cm_port(handle) != 0) return 3;
    report.write(Report{registry->self().slot, handle});
    for (;;) pause();
  });
  Report held{};
  ASSERT_TRUE(report.read(held));

  ShmRegistry::CmBinding found;
  ASSERT_TRUE(listener(kPsTcp, 7777, ipv4(9), &found));
  EXPECT_EQ(held.slot, found.slot);
  EXPECT_EQ(99u, found.agent_qpn);
  EXPECT_EQ(EADDRINUSE, bind(*registry_, kPsTcp, ipv4(9), 7777)) << "the child holds it";
  EXPECT_EQ(EINVAL, registry_->listen_cm_port(held.handle)) << "the child's handle";
  registry_->release_cm_port(held.handle);
  EXPECT_TRUE(listener(kPsTcp, 7777, ipv4(9))) << "not released by another process";

  kill(child, SIGKILL);
  testing::wait_child(child);
  RawRegistry raw;
  ASSERT_TRUE(raw.layout());
  EXPECT_EQ(1u, raw.bindings_of(held.slot)) << "not reclaimed yet";
  EXPECT_FALSE(listener(kPsTcp, 7777, ipv4(9))) << "a dead owner is passed over";

  // The next bind reclaims the dead process's slot, and its port with it.
  registry_->release_cm_port(placeholder);
  uint32_t handle = 0;
  ASSERT_EQ(0, bind(*registry_, kPsTcp, ipv4(9), 7777, &handle));
  EXPECT_EQ(placeholder, handle);
  EXPECT_EQ(0u, raw.bindings_of(held.slot)) << "the child's entry was cleared";
  ASSERT_EQ(0, registry_->listen_cm_port(handle));
  ASSERT_TRUE(listener(kPsTcp, 7777, ipv4(9), &found));
  EXPECT_EQ(registry_->self().slot, found.slot);
}

TEST_F(ShmRegistryCm, AScribbledTableIsReadWithoutHarm) {
  RawRegistry raw;
  ASSERT_TRUE(raw.layout());
  std::mt19937 random(11);
  auto* bytes = reinterpret_cast<uint8_t*>(raw.layout()->cm_bindings);
  for (size_t i = 0; i < sizeof(raw.layout()->cm_bindings); ++i)
    bytes[i] = static_cast<uint8_t>(random());
  // This process is the only live one: whatever is found is its own.
  for (int i = 0; i < 64; ++i) {
    ShmRegistry::CmBinding found;
    const auto port = static_cast<uint16_t>(random());
    if (registry_->find_cm_listener(raw.layout()->cm_bindings[i].port_space, port, kAny, found)) {
      EXPECT_EQ(registry_->self().slot, found.slot);
    }
  }
  for (int i = 0; i < 64; ++i) {
    uint16_t port = static_cast<uint16_t>(random());
    uint32_t handle = 0;
    const Errno err = registry_->bind_cm_port(kPsTcp, kAny, port, 2, handle);
    EXPECT_TRUE(err == 0 || err == EADDRNOTAVAIL || err == ENOMEM) << err;
    if (err == 0) {
      EXPECT_LT(handle, kMaxCmBindings);
    }
  }
}

}  // namespace
}  // namespace softverbs
