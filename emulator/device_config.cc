#include "emulator/device_config.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace softverbs {
namespace {

// A locally administered OUI-like prefix, so soft GUIDs never collide with a
// vendor's real ones.
constexpr uint64_t kGuidPrefix = 0x02'53'56'ff'fe'00'00'00ull;  // "SV"

Gid link_local_gid(uint64_t guid) {
  Gid gid{};
  gid[0] = 0xfe;
  gid[1] = 0x80;
  for (int i = 0; i < 8; ++i) gid[8 + i] = static_cast<uint8_t>(guid >> (56 - 8 * i));
  return gid;
}

struct Catalog {
  std::vector<DeviceDescription> devices;
  std::string error;
};

Catalog build_catalog() {
  Catalog catalog;
  uint32_t count = 1;
  if (const char* env = std::getenv("SOFTVERBS_DEVICES"); env && *env) {
    char* end = nullptr;
    unsigned long parsed = std::strtoul(env, &end, 10);
    if (*end != '\0' || parsed > 16) {
      catalog.error = std::string("SOFTVERBS_DEVICES='") + env +
                      "' is not a device count from 0 to 16";
      return catalog;
    }
    count = static_cast<uint32_t>(parsed);
  }
  LinkLayer link = LinkLayer::kInfiniBand;
  if (const char* env = std::getenv("SOFTVERBS_LINK_LAYER"); env && *env) {
    if (std::strcmp(env, "ib") == 0) {
      link = LinkLayer::kInfiniBand;
    } else if (std::strcmp(env, "eth") == 0) {
      // RoCEv2 needs the UDP wire, which is not built yet.
      catalog.error = "SOFTVERBS_LINK_LAYER=eth is not supported yet; use 'ib'";
      return catalog;
    } else {
      catalog.error = std::string("SOFTVERBS_LINK_LAYER='") + env +
                      "' is neither 'ib' nor 'eth'";
      return catalog;
    }
  }
  for (uint32_t i = 0; i < count; ++i) {
    DeviceDescription d;
    d.name = "softverbs" + std::to_string(i);
    d.index = i;
    d.node_guid = kGuidPrefix | (i + 1);
    d.link_layer = link;
    d.lid = static_cast<uint16_t>(i + 1);
    d.gids.push_back(link_local_gid(d.node_guid));
    catalog.devices.push_back(std::move(d));
  }
  return catalog;
}

const Catalog& catalog() {
  // Never destroyed: the progress thread routes frames with it while static
  // objects are being torn down at exit.
  static const Catalog* instance = new Catalog(build_catalog());
  return *instance;
}

}  // namespace

std::vector<DeviceDescription> configured_devices(std::string* error) {
  if (error) *error = catalog().error;
  return catalog().devices;
}

const DeviceDescription* find_device_by_lid(uint16_t lid) {
  for (const auto& d : catalog().devices)
    if (d.lid == lid && lid != 0) return &d;
  return nullptr;
}

const DeviceDescription* find_device_by_gid(const Gid& gid) {
  for (const auto& d : catalog().devices)
    for (const auto& g : d.gids)
      if (g == gid) return &d;
  return nullptr;
}

}  // namespace softverbs
