#include "harness/testsupport/device.h"

#include <cerrno>

#include "harness/testsupport/test_config.h"

namespace softverbs::testsupport {

ContextPtr open_device(const std::string& name, Errno& err) {
  int count = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (!list) {
    err = errno ? errno : ENODEV;
    return nullptr;
  }
  ContextPtr context;
  err = ENODEV;
  for (int i = 0; i < count; ++i) {
    if (name != ibv_get_device_name(list[i])) continue;
    errno = 0;
    context.reset(ibv_open_device(list[i]));
    err = context ? 0 : (errno ? errno : ENODEV);
    break;
  }
  // Contexts stay valid after the list is freed (ibv_get_device_list(3)).
  ibv_free_device_list(list);
  return context;
}

ContextPtr open_test_device(Errno& err) {
  return open_device(test_config().device_name, err);
}

namespace {

// The first other active InfiniBand port of the device, if it has one.
void find_alternate_port(ibv_context* context, PortAddress& out) {
  ibv_device_attr device{};
  if (out.use_grh || ibv_query_device(context, &device) != 0) return;
  for (uint8_t port = 1; port <= device.phys_port_cnt; ++port) {
    ibv_port_attr attr{};
    if (port == out.port || ibv_query_port(context, port, &attr) != 0) continue;
    if (attr.link_layer == IBV_LINK_LAYER_ETHERNET || attr.lid == 0) continue;
    out.alt_port = port;
    out.alt_lid = attr.lid;
    return;
  }
}

}  // namespace

Errno query_port_address(ibv_context* context, uint8_t port, int gid_index,
                         PortAddress& out) {
  ibv_port_attr attr{};
  if (int rc = ibv_query_port(context, port, &attr)) return rc;
  out = PortAddress{};
  out.port = port;
  out.lid = attr.lid;
  out.active_mtu = attr.active_mtu;
  out.link_layer = attr.link_layer;
  out.gid_index = static_cast<uint8_t>(gid_index);
  if (ibv_query_gid(context, port, gid_index, &out.gid) != 0) return errno ? errno : EINVAL;
  // IBV_LINK_LAYER_UNSPECIFIED is what older drivers report for IB ports.
  bool infiniband = attr.link_layer == IBV_LINK_LAYER_INFINIBAND ||
                    attr.link_layer == IBV_LINK_LAYER_UNSPECIFIED;
  out.use_grh = !(infiniband && attr.lid != 0);
  find_alternate_port(context, out);
  return 0;
}

Errno query_test_port_address(ibv_context* context, PortAddress& out) {
  const TestConfig& config = test_config();
  return query_port_address(context, config.port, config.gid_index, out);
}

}  // namespace softverbs::testsupport
