// Opening a device and querying it: device, port, GID and P_Key tables.
#include <algorithm>
#include <cstring>

#include "provider/exports.h"
#include "provider/real_library.h"
#include "provider/soft_context.h"
#include "provider/translate.h"

namespace softverbs::provider {
namespace {

// What the exported (compat) ibv_query_port may write: the struct as it was
// before port_cap_flags2 was added. The inline ibv_query_port uses the op.
constexpr size_t kCompatPortAttrSize = offsetof(ibv_port_attr, port_cap_flags2);

// ibv_gid_type of a link layer's GIDs.
uint32_t gid_type_of(LinkLayer link_layer) {
  return link_layer == LinkLayer::kEthernet ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_IB;
}

Errno query_port(SoftContext& context, uint8_t port_num, ibv_port_attr& out) {
  PortAttributes port;
  if (Errno err = context.hca->query_port(port_num, port)) return err;
  to_ibv_port_attr(port, out);
  return 0;
}

// One GID table entry; ENODATA for an empty slot inside the table.
Errno query_gid_entry(SoftContext& context, uint32_t port_num, uint32_t index,
                      ibv_gid_entry& out) {
  if (port_num > UINT8_MAX) return EINVAL;
  Gid gid;
  if (Errno err = context.hca->query_gid(static_cast<uint8_t>(port_num), index, gid))
    return err;
  if (is_zero_gid(gid)) return ENODATA;
  std::memset(&out, 0, sizeof(out));
  out.gid = to_ibv_gid(gid);
  out.gid_index = index;
  out.port_num = port_num;
  out.gid_type = gid_type_of(context.device->description.link_layer);
  const auto& gids = context.device->description.gids_of(static_cast<uint8_t>(port_num));
  out.ndev_ifindex = index < gids.size() ? gids[index].ifindex : 0;
  return 0;
}

}  // namespace

int soft_query_port(ibv_context* context, uint8_t port_num,
                    ibv_port_attr* port_attr, size_t port_attr_len) {
  SoftContext* soft = soft_context(context);
  if (!soft || !port_attr) return EINVAL;
  ibv_port_attr full;
  if (Errno err = query_port(*soft, port_num, full)) return err;
  // Older programs pass a shorter struct; newer fields they don't know of
  // stay out of their memory.
  std::memcpy(port_attr, &full, std::min(port_attr_len, sizeof(full)));
  return 0;
}

int soft_query_device_ex(ibv_context* context,
                         const ibv_query_device_ex_input* input,
                         ibv_device_attr_ex* attr, size_t attr_size) {
  SoftContext* soft = soft_context(context);
  if (!soft || !attr) return EINVAL;
  if (input && input->comp_mask) return EINVAL;
  if (attr_size < sizeof(attr->orig_attr)) return EINVAL;
  ibv_device_attr_ex full;
  to_ibv_device_attr_ex(soft->hca->attributes(), full);
  std::memset(attr, 0, attr_size);
  std::memcpy(attr, &full, std::min(attr_size, sizeof(full)));
  return 0;
}

int soft_query_rt_values(ibv_context* context, ibv_values_ex* values) {
  SoftContext* soft = soft_context(context);
  if (!soft || !values) return EINVAL;
  if (values->comp_mask & ~static_cast<uint32_t>(IBV_VALUES_MASK_RAW_CLOCK)) return EINVAL;
  uint32_t filled = 0;
  if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
    // The clock completion timestamps are read on, in its own units
    // (nanoseconds), carried in tv_nsec as mlx5 and rxe carry raw cycles.
    values->raw_clock.tv_sec = 0;
    values->raw_clock.tv_nsec = static_cast<long>(soft->hca->clock_ns());
    filled |= IBV_VALUES_MASK_RAW_CLOCK;
  }
  values->comp_mask = filled;
  return 0;
}

}  // namespace softverbs::provider

using namespace softverbs;
using namespace softverbs::provider;

SOFTVERBS_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  if (!device) {
    errno = EINVAL;
    return nullptr;
  }
  SoftDevice* soft = soft_device(device);
  if (!soft) SOFTVERBS_FORWARD(nullptr, ibv_open_device, device);
  return errno_on_exception(
      [&]() -> ibv_context* {
        Errno err = 0;
        SoftContext* context = open_soft_context(*soft, err);
        if (!context) {
          errno = err ? err : ENOMEM;
          return nullptr;
        }
        return context->ibv();
      },
      static_cast<ibv_context*>(nullptr));
}

SOFTVERBS_EXPORT int ibv_close_device(ibv_context* context) {
  if (!context) {
    errno = EINVAL;
    return -1;
  }
  SoftContext* soft = soft_context(context);
  if (!soft) SOFTVERBS_FORWARD(-1, ibv_close_device, context);
  close_soft_context(soft);
  return 0;
}

SOFTVERBS_EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* device_attr) {
  if (!context || !device_attr) return EINVAL;
  SoftContext* soft = soft_context(context);
  if (!soft) SOFTVERBS_FORWARD(ENOSYS, ibv_query_device, context, device_attr);
  to_ibv_device_attr(soft->hca->attributes(), *device_attr);
  return 0;
}

SOFTVERBS_EXPORT int ibv_query_port(ibv_context* context, uint8_t port_num,
                                    _compat_ibv_port_attr* port_attr) {
  if (!context || !port_attr) return EINVAL;
  SoftContext* soft = soft_context(context);
  if (!soft) SOFTVERBS_FORWARD(ENOSYS, ibv_query_port, context, port_num, port_attr);
  ibv_port_attr full;
  if (Errno err = query_port(*soft, port_num, full)) return err;
  std::memcpy(port_attr, &full, kCompatPortAttrSize);
  return 0;
}

SOFTVERBS_EXPORT int ibv_query_gid(ibv_context* context, uint8_t port_num, int index,
                                   ibv_gid* gid) {
  if (!context || !gid || index < 0) {
    errno = EINVAL;
    return -1;
  }
  SoftContext* soft = soft_context(context);
  if (!soft) SOFTVERBS_FORWARD(-1, ibv_query_gid, context, port_num, index, gid);
  Gid value;
  if (Errno err = soft->hca->query_gid(port_num, static_cast<uint32_t>(index), value)) {
    errno = err;
    return -1;
  }
  *gid = to_ibv_gid(value);
  return 0;
}

SOFTVERBS_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num,
                                       uint32_t gid_index, ibv_gid_entry* entry,
                                       uint32_t flags, size_t entry_size) {
  if (!context || !entry) return EINVAL;
  SoftContext* soft = soft_context(context);
  if (!soft)
    SOFTVERBS_FORWARD(ENOSYS, _ibv_query_gid_ex, context, port_num, gid_index, entry,
                      flags, entry_size);
  if (flags != 0 || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  ibv_gid_entry value;
  if (Errno err = query_gid_entry(*soft, port_num, gid_index, value)) return err;
  std::memset(entry, 0, entry_size);
  *entry = value;
  return 0;
}

SOFTVERBS_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries,
                                              size_t max_entries, uint32_t flags,
                                              size_t entry_size) {
  if (!context) return -EINVAL;
  SoftContext* soft = soft_context(context);
  if (!soft)
    SOFTVERBS_FORWARD(-ENOSYS, _ibv_query_gid_table, context, entries, max_entries,
                      flags, entry_size);
  if (!entries || max_entries == 0 || flags != 0 || entry_size < sizeof(ibv_gid_entry))
    return -EINVAL;
  auto* out = reinterpret_cast<uint8_t*>(entries);
  size_t count = 0;
  const uint8_t ports = soft->hca->attributes().phys_port_cnt;
  for (uint8_t port = 1; port <= ports; ++port) {
    PortAttributes port_attr;
    if (Errno err = soft->hca->query_port(port, port_attr)) return -err;
    for (uint32_t index = 0; index < port_attr.gid_tbl_len; ++index) {
      ibv_gid_entry value;
      Errno err = query_gid_entry(*soft, port, index, value);
      if (err == ENODATA) continue;
      if (err) return -err;
      // All valid entries must fit (ibv_query_gid_table(3)).
      if (count == max_entries) return -EINVAL;
      std::memset(out + count * entry_size, 0, entry_size);
      std::memcpy(out + count * entry_size, &value, sizeof(value));
      ++count;
    }
  }
  return static_cast<ssize_t>(count);
}

SOFTVERBS_EXPORT int ibv_query_gid_type(ibv_context* context, uint8_t port_num,
                                        unsigned int index, unsigned int* type) {
  if (!context || !type) {
    errno = EINVAL;
    return -1;
  }
  SoftContext* soft = soft_context(context);
  if (!soft) SOFTVERBS_FORWARD(-1, ibv_query_gid_type, context, port_num, index, type);
  Gid gid;
  if (Errno err = soft->hca->query_gid(port_num, index, gid)) {
    errno = err;
    return -1;
  }
  // enum ibv_gid_type_sysfs: 0 = IB / RoCE v1, 1 = RoCE v2.
  *type = soft->device->description.link_layer == LinkLayer::kEthernet ? 1 : 0;
  return 0;
}

SOFTVERBS_EXPORT int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index,
                                    __be16* pkey) {
  if (!context || !pkey || index < 0) {
    errno = EINVAL;
    return -1;
  }
  SoftContext* soft = soft_context(context);
  if (!soft) SOFTVERBS_FORWARD(-1, ibv_query_pkey, context, port_num, index, pkey);
  uint16_t value;
  if (Errno err = soft->hca->query_pkey(port_num, static_cast<uint32_t>(index), value)) {
    errno = err;
    return -1;
  }
  *pkey = htobe16(value);
  return 0;
}

SOFTVERBS_EXPORT int ibv_get_pkey_index(ibv_context* context, uint8_t port_num,
                                        __be16 pkey) {
  if (!context) {
    errno = EINVAL;
    return -1;
  }
  SoftContext* soft = soft_context(context);
  if (!soft) SOFTVERBS_FORWARD(-1, ibv_get_pkey_index, context, port_num, pkey);
  PortAttributes port;
  if (Errno err = soft->hca->query_port(port_num, port)) {
    errno = err;
    return -1;
  }
  for (uint32_t index = 0; index < port.pkey_tbl_len; ++index) {
    uint16_t value;
    if (soft->hca->query_pkey(port_num, index, value) == 0 && htobe16(value) == pkey)
      return static_cast<int>(index);
  }
  errno = ENOENT;
  return -1;
}
