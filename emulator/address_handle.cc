// Address handles: an address vector checked once and resolved to the soft
// device that owns its destination.
#include <cerrno>

#include "emulator/hca_impl.h"

namespace softverbs {
namespace {

// IBTA 4.1.1 (multicast LIDs) and 4.1.1.3 (GIDs with prefix ff00::/8).
bool is_multicast(const AddressVector& av) {
  constexpr uint16_t kFirstMulticastLid = 0xc000;
  constexpr uint16_t kPermissiveLid = 0xffff;
  if (av.dlid >= kFirstMulticastLid && av.dlid != kPermissiveLid) return true;
  return av.is_global && av.dgid[0] == 0xff;
}

}  // namespace

std::unique_ptr<Ah> Hca::create_ah(Pd& pd, const AddressVector& av, Errno& err) {
  PortAttributes port;
  query_port(1, port);
  if (av.port_num != 1 || (av.is_global && av.sgid_index >= port.gid_tbl_len)) {
    err = EINVAL;
    return nullptr;
  }
  const bool multicast = is_multicast(av);
  uint32_t device = Ah::kNoDevice;
  if (multicast) {
    device = impl_->description.index;  // groups are joined on this device
  } else {
    const DeviceDescription* owner = av.is_global ? find_device_by_gid(av.dgid) : nullptr;
    if (!owner) owner = find_device_by_lid(av.dlid);
    if (owner) device = owner->index;
  }
  pd.users.fetch_add(1);
  err = 0;
  return std::unique_ptr<Ah>(new Ah(pd, av, device, multicast));
}

Ah::~Ah() { pd_.users.fetch_sub(1); }

}  // namespace softverbs
