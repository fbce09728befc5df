// Address handles: an address vector checked once and resolved to the soft
// device that owns its destination.
#include <algorithm>
#include <cerrno>

#include "emulator/objects/hca_impl.h"

namespace softverbs {

bool is_multicast_gid(const Gid& gid) {
  if (gid[0] == 0xff) return true;
  const bool v4_mapped = std::all_of(gid.begin(), gid.begin() + 10,
                                     [](uint8_t b) { return b == 0; }) &&
                         gid[10] == 0xff && gid[11] == 0xff;
  return v4_mapped && (gid[12] & 0xf0) == 0xe0;
}

bool is_multicast_lid(uint16_t lid) { return lid >= 0xc000 && lid != 0xffff; }

namespace {

// IBTA 4.1.1 (multicast LIDs 0xC000-0xFFFE) and GIDs of a group: ff00::/8,
// or (RoCE) an IPv4 multicast address mapped into IPv6, ::ffff:224.0.0.0/100.
// A RoCE port has no LIDs: its DLID means nothing (rxe ignores it, mlx5
// takes it for the UDP source port, UCX sets 0xC000), so only the GID says.
bool is_multicast(const AddressVector& av, LinkLayer link_layer) {
  if (av.is_global && is_multicast_gid(av.dgid)) return true;
  return link_layer == LinkLayer::kInfiniBand && is_multicast_lid(av.dlid);
}

}  // namespace

std::unique_ptr<Ah> Hca::create_ah(Pd& pd, const AddressVector& av, Errno& err) {
  PortAttributes port;
  query_port(1, port);
  // A RoCE port routes by GID only: an AH without a GRH has no address.
  const bool needs_grh = impl_->description.link_layer == LinkLayer::kEthernet;
  if (!impl_->description.has_port(av.port_num) ||
      (av.is_global && av.sgid_index >= port.gid_tbl_len) ||
      (needs_grh && !av.is_global)) {
    err = EINVAL;
    return nullptr;
  }
  ObjectQuota::Slot slot = take_slot(ObjectKind::kAh, err);
  if (!slot) return nullptr;
  const LinkLayer link_layer = impl_->description.link_layer;
  const bool multicast = is_multicast(av, link_layer);
  uint32_t device = Ah::kNoDevice;
  if (multicast) {
    device = impl_->description.index;  // groups are joined on this device
  } else {
    const DeviceDescription* owner = av.is_global ? find_device_by_gid(av.dgid) : nullptr;
    if (!owner && link_layer == LinkLayer::kInfiniBand) owner = find_device_by_lid(av.dlid);
    if (owner) device = owner->index;
    else if (av.is_global) device = WireAddress::kOffHost;  // another host's GID
  }
  pd.users.fetch_add(1);
  err = 0;
  return std::unique_ptr<Ah>(new Ah(pd, av, device, multicast, std::move(slot)));
}

Ah::~Ah() { pd_.users.fetch_sub(1); }

}  // namespace softverbs
