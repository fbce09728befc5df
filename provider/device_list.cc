// ibv_get_device_list and friends: soft devices first, then the real
// library's list.
#include "provider/device_list.h"

#include <endian.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "provider/exports.h"
#include "provider/real_library.h"
#include "provider/sysfs_files.h"

namespace softverbs::provider {
namespace {

// The soft array's bounds, published once; is_soft_device() is a range check.
std::atomic<SoftDevice*> g_first{nullptr};
std::atomic<SoftDevice*> g_last{nullptr};  // one past the end

void copy_name(char* dst, size_t size, const std::string& src) {
  std::snprintf(dst, size, "%s", src.c_str());
}

void fill_device(SoftDevice& device, const DeviceDescription& description) {
  std::memset(&device.ibv, 0, sizeof(device.ibv));
  device.description = description;
  ibv_device& ibv = device.ibv;
  ibv.node_type = IBV_NODE_CA;
  ibv.transport_type = IBV_TRANSPORT_IB;
  copy_name(ibv.name, sizeof(ibv.name), description.name);
  // Paths a kernel device would have; nothing exists there, and
  // ibv_read_sysfs_file serves what programs read below them.
  const std::string uverbs = uverbs_name(description);
  copy_name(ibv.dev_name, sizeof(ibv.dev_name), uverbs);
  copy_name(ibv.dev_path, sizeof(ibv.dev_path),
            "/sys/class/infiniband_verbs/" + uverbs);
  copy_name(ibv.ibdev_path, sizeof(ibv.ibdev_path),
            "/sys/class/infiniband/" + description.name);
}

std::span<SoftDevice> build_soft_devices() {
  std::string error;
  std::vector<DeviceDescription> descriptions;
  try {
    descriptions = configured_devices(&error);
  } catch (...) {
    error = "out of memory while listing the soft devices";
  }
  if (!error.empty()) {
    std::fprintf(stderr, "softverbs: %s\n", error.c_str());
    return {};
  }
  if (descriptions.empty()) return {};
  auto* devices = new (std::nothrow) SoftDevice[descriptions.size()];
  if (!devices) return {};
  for (size_t i = 0; i < descriptions.size(); ++i)
    fill_device(devices[i], descriptions[i]);
  g_first.store(devices, std::memory_order_release);
  g_last.store(devices + descriptions.size(), std::memory_order_release);
  return {devices, descriptions.size()};
}

// The real sub-list behind each list we returned, so that
// ibv_free_device_list hands the right pointer back to the real library.
std::mutex g_lists_mutex;
std::unordered_map<ibv_device**, ibv_device**>& returned_lists() {
  static auto* lists = new std::unordered_map<ibv_device**, ibv_device**>;
  return *lists;
}

}  // namespace

std::span<SoftDevice> soft_devices() {
  static const std::span<SoftDevice> devices = build_soft_devices();
  return devices;
}

bool is_soft_device(const ibv_device* device) {
  auto* first = g_first.load(std::memory_order_acquire);
  auto* last = g_last.load(std::memory_order_acquire);
  auto address = reinterpret_cast<uintptr_t>(device);
  return first && address >= reinterpret_cast<uintptr_t>(first) &&
         address < reinterpret_cast<uintptr_t>(last);
}

SoftDevice* soft_device(ibv_device* device) {
  return is_soft_device(device) ? soft_of<SoftDevice>(device) : nullptr;
}

}  // namespace softverbs::provider

using namespace softverbs;
using namespace softverbs::provider;

SOFTVERBS_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
  std::span<SoftDevice> soft = soft_devices();
  if (soft.empty()) SOFTVERBS_FORWARD(nullptr, ibv_get_device_list, num_devices);

  int real_count = 0;
  ibv_device** real_list = nullptr;
  if (auto* real = reinterpret_cast<decltype(&ibv_get_device_list)>(
          real_symbol("ibv_get_device_list"))) {
    // NULL with ENOSYS on machines without RDMA: the soft devices still count.
    real_list = real(&real_count);
    if (!real_list) real_count = 0;
  }

  const size_t total = soft.size() + static_cast<size_t>(real_count);
  auto** list = static_cast<ibv_device**>(std::calloc(total + 1, sizeof(ibv_device*)));
  bool remembered = list != nullptr;
  if (list) {
    for (size_t i = 0; i < soft.size(); ++i) list[i] = &soft[i].ibv;
    for (int i = 0; i < real_count; ++i) list[soft.size() + i] = real_list[i];
    remembered = errno_on_exception(
        [&] {
          std::lock_guard lock(g_lists_mutex);
          returned_lists().emplace(list, real_list);
          return true;
        },
        false);
  }
  if (!remembered) {
    std::free(list);
    if (real_list) {
      if (auto* real_free = reinterpret_cast<decltype(&ibv_free_device_list)>(
              real_symbol("ibv_free_device_list")))
        real_free(real_list);
    }
    errno = ENOMEM;
    return nullptr;
  }
  if (num_devices) *num_devices = static_cast<int>(total);
  return list;
}

SOFTVERBS_EXPORT void ibv_free_device_list(ibv_device** list) {
  if (!list) return;
  bool ours = false;
  ibv_device** real_list = nullptr;
  {
    std::lock_guard lock(g_lists_mutex);
    auto it = returned_lists().find(list);
    if (it != returned_lists().end()) {
      ours = true;
      real_list = it->second;
      returned_lists().erase(it);
    }
  }
  // Not one of ours: a list from the real library's own entry point.
  if (!ours) SOFTVERBS_FORWARD_VOID(ibv_free_device_list, list);
  std::free(list);
  if (real_list) SOFTVERBS_FORWARD_VOID(ibv_free_device_list, real_list);
}

SOFTVERBS_EXPORT const char* ibv_get_device_name(ibv_device* device) {
  if (!device) {
    errno = EINVAL;
    return nullptr;
  }
  if (is_soft_device(device)) return device->name;
  SOFTVERBS_FORWARD(nullptr, ibv_get_device_name, device);
}

SOFTVERBS_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
  if (!device) {
    errno = EINVAL;
    return 0;
  }
  if (SoftDevice* soft = soft_device(device))
    return htobe64(soft->description.node_guid);
  SOFTVERBS_FORWARD(0, ibv_get_device_guid, device);
}

SOFTVERBS_EXPORT int ibv_get_device_index(ibv_device* device) {
  if (!device) {
    errno = EINVAL;
    return -1;
  }
  // A soft device has no kernel ibdev index; -1 is the documented "no index"
  // answer, and any made-up number could collide with a real device's.
  if (is_soft_device(device)) return -1;
  SOFTVERBS_FORWARD(-1, ibv_get_device_index, device);
}
