// Address handles and the helpers that build address attributes.
#include <endian.h>

#include <cstring>

#include "provider/exports.h"
#include "provider/real_library.h"
#include "provider/soft_context.h"
#include "provider/translate.h"

namespace softverbs::provider {
namespace {

// GRH next-header value of an IBA packet (IBTA 8.3.1): what follows is a BTH.
constexpr uint8_t kGrhNextHeaderIba = 0x1b;

// The local GID index whose GID is `gid`, or -1.
int find_gid_index(SoftContext& context, uint8_t port_num, const Gid& gid) {
  PortAttributes port;
  if (context.hca->query_port(port_num, port) != 0) return -1;
  for (uint32_t index = 0; index < port.gid_tbl_len; ++index) {
    Gid local;
    if (context.hca->query_gid(port_num, index, local) == 0 && local == gid)
      return static_cast<int>(index);
  }
  return -1;
}

ibv_ah* create_soft_ah(SoftContext& context, ibv_pd* pd, const ibv_ah_attr& attr) {
  std::unique_ptr<SoftAh> ah(new SoftAh{});
  Errno err = 0;
  ah->ah = context.hca->create_ah(soft_of<SoftPd>(pd)->protection_domain(), from_ibv_ah_attr(attr), err);
  if (!ah->ah) {
    errno = err ? err : ENOMEM;
    return nullptr;
  }
  {
    std::lock_guard lock(context.objects.mutex);
    context.objects.ahs.insert(ah.get());
  }
  ah->ibv.context = pd->context;
  ah->ibv.pd = pd;
  ah->ibv.handle = 0;
  return &ah.release()->ibv;
}

}  // namespace

void destroy_soft_ah(SoftContext& context, SoftAh* ah) {
  {
    std::lock_guard lock(context.objects.mutex);
    context.objects.ahs.erase(ah);
  }
  delete ah;
}

}  // namespace softverbs::provider

using namespace softverbs;
using namespace softverbs::provider;

SOFTVERBS_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (!pd) {
    errno = EINVAL;
    return nullptr;
  }
  SoftContext* context = soft_context(pd->context);
  if (!context) SOFTVERBS_FORWARD(nullptr, ibv_create_ah, pd, attr);
  if (!attr) {
    errno = EINVAL;
    return nullptr;
  }
  return errno_on_exception([&] { return create_soft_ah(*context, pd, *attr); },
                            static_cast<ibv_ah*>(nullptr));
}

SOFTVERBS_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  if (!ah) return EINVAL;
  SoftContext* context = soft_context(ah->context);
  if (!context) SOFTVERBS_FORWARD(ENOSYS, ibv_destroy_ah, ah);
  destroy_soft_ah(*context, soft_of<SoftAh>(ah));
  return 0;
}

SOFTVERBS_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh,
                                               uint8_t port_num) {
  if (!pd) {
    errno = EINVAL;
    return nullptr;
  }
  if (!is_soft(pd->context))
    SOFTVERBS_FORWARD(nullptr, ibv_create_ah_from_wc, pd, wc, grh, port_num);
  // As libibverbs does: the attributes back to the sender, then an AH.
  ibv_ah_attr attr;
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) return nullptr;
  return ibv_create_ah(pd, &attr);
}

// Builds the attributes of an AH back to the sender of `wc` (IB link layer):
// its LID, SL and path bits, and with a GRH its GID, hop limit, class and
// flow label, with the receiving GID's index as the source GID index.
SOFTVERBS_EXPORT int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num,
                                         ibv_wc* wc, ibv_grh* grh, ibv_ah_attr* ah_attr) {
  if (!context || !wc || !ah_attr) {
    errno = EINVAL;
    return -1;
  }
  SoftContext* soft = soft_context(context);
  if (!soft)
    SOFTVERBS_FORWARD(-1, ibv_init_ah_from_wc, context, port_num, wc, grh, ah_attr);
  ibv_ah_attr out;
  std::memset(&out, 0, sizeof(out));
  out.dlid = wc->slid;
  out.sl = wc->sl;
  out.src_path_bits = wc->dlid_path_bits;
  out.port_num = port_num;
  if (wc->wc_flags & IBV_WC_GRH) {
    if (!grh) {
      errno = EINVAL;
      return -1;
    }
    const uint32_t version_class_flow = be32toh(grh->version_tclass_flow);
    if ((version_class_flow >> 28) != 6 || grh->next_hdr != kGrhNextHeaderIba) {
      errno = EPROTONOSUPPORT;
      return -1;
    }
    if (grh->dgid.raw[0] == 0xff) {  // multicast: no local GID to answer from
      errno = EINVAL;
      return -1;
    }
    const int sgid_index = find_gid_index(*soft, port_num, from_ibv_gid(grh->dgid));
    if (sgid_index < 0) {
      errno = ENOENT;
      return -1;
    }
    out.is_global = 1;
    out.grh.dgid = grh->sgid;
    out.grh.sgid_index = static_cast<uint8_t>(sgid_index);
    out.grh.hop_limit = grh->hop_limit;
    out.grh.traffic_class = static_cast<uint8_t>((version_class_flow >> 20) & 0xff);
    out.grh.flow_label = version_class_flow & 0xfffff;
  }
  *ah_attr = out;
  return 0;
}

SOFTVERBS_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context* context, ibv_ah_attr* attr,
                                                 uint8_t eth_mac[ETHERNET_LL_SIZE],
                                                 uint16_t* vid) {
  if (!context) return -EINVAL;
  SoftContext* soft = soft_context(context);
  if (!soft)
    SOFTVERBS_FORWARD(-ENOSYS, ibv_resolve_eth_l2_from_gid, context, attr, eth_mac, vid);
  // An InfiniBand port has no Ethernet neighbour to resolve; the RoCE link
  // layer is not supported yet.
  return soft->device->description.link_layer == softverbs::LinkLayer::kEthernet
             ? -EOPNOTSUPP
             : -EINVAL;
}

SOFTVERBS_EXPORT int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (!qp || !gid) return EINVAL;
  if (!is_soft(qp->context)) SOFTVERBS_FORWARD(ENOSYS, ibv_attach_mcast, qp, gid, lid);
  Qp& hca_qp = *soft_of<SoftQp>(qp)->qp;
  return errno_on_exception([&] { return hca_qp.attach_multicast(from_ibv_gid(*gid), lid); },
                            ENOMEM);
}

SOFTVERBS_EXPORT int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (!qp || !gid) return EINVAL;
  if (!is_soft(qp->context)) SOFTVERBS_FORWARD(ENOSYS, ibv_detach_mcast, qp, gid, lid);
  Qp& hca_qp = *soft_of<SoftQp>(qp)->qp;
  return errno_on_exception([&] { return hca_qp.detach_multicast(from_ibv_gid(*gid), lid); },
                            ENOMEM);
}
