// Who joined which multicast group (IBTA 10.5): the host's soft devices are
// one fabric, so members may be QPs of any device and any process. A copy
// of a datagram goes to one member per process (a route); that process's
// intake hands it to each of its own members.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "emulator/types.h"

namespace softverbs {

struct MulticastRoute {
  uint32_t device_index = 0;
  uint32_t qpn = 0;
};

class MulticastDirectory {
 public:
  virtual ~MulticastDirectory() = default;
  // Idempotent. ENOMEM when no more attachments fit.
  virtual Errno attach(uint32_t device_index, const Gid& gid, uint16_t lid, uint32_t qpn) = 0;
  // EINVAL when the QP is not attached to that group.
  virtual Errno detach(uint32_t device_index, const Gid& gid, uint16_t lid, uint32_t qpn) = 0;
  // One route per process with members. A group addressed without a GRH
  // is matched by its LID (gid null).
  virtual Errno routes(const Gid* gid, uint16_t lid, std::vector<MulticastRoute>& out) = 0;
};

// Members in this process only (unit tests, the loopback wire).
class LocalMulticastDirectory final : public MulticastDirectory {
 public:
  Errno attach(uint32_t device_index, const Gid& gid, uint16_t lid, uint32_t qpn) override;
  Errno detach(uint32_t device_index, const Gid& gid, uint16_t lid, uint32_t qpn) override;
  Errno routes(const Gid* gid, uint16_t lid, std::vector<MulticastRoute>& out) override;

 private:
  struct Member {
    uint32_t device_index;
    Gid gid;
    uint16_t lid;
    uint32_t qpn;
  };
  std::mutex mutex_;
  std::vector<Member> members_;
};

}  // namespace softverbs
