// fork() and registered memory (ibv_fork_init(3)). A real HCA pins the pages
// of a registration, so a child's copy-on-write would leave the parent's
// DMA on pages that are no longer the parent's: libibverbs marks them
// MADV_DONTFORK after ibv_fork_init, unless the kernel copies pinned pages
// at fork (IBV_FORK_UNNEEDED). A soft device pins nothing: the parent's own
// engine places and fetches every byte in the parent's address space,
// after a fork as before, and a child gets a copy. Shared MR pages
// (shared_pages.h), which cannot be copied on write, are copied for the
// child at the fork, as the kernel copies pinned pages. So with soft
// devices alone fork protection is unneeded; with real devices present,
// their library decides.
#include <infiniband/verbs.h>

#include "provider/exports.h"
#include "provider/real_library.h"

namespace {

// Whether the system library sees any device (an HCA, rxe) at all.
bool real_devices_present() {
  using List = decltype(&ibv_get_device_list);
  using Free = decltype(&ibv_free_device_list);
  static const auto list = reinterpret_cast<List>(
      softverbs::provider::real_symbol("ibv_get_device_list"));
  static const auto free_list = reinterpret_cast<Free>(
      softverbs::provider::real_symbol("ibv_free_device_list"));
  if (!list || !free_list) return false;
  int count = 0;
  ibv_device** devices = list(&count);
  if (!devices) return false;
  free_list(devices);
  return count > 0;
}

}  // namespace

// The system library's: it tracks only registrations on its own devices, so
// soft registrations never make it EINVAL.
SOFTVERBS_EXPORT int ibv_fork_init(void) { SOFTVERBS_FORWARD(0, ibv_fork_init); }

SOFTVERBS_EXPORT ibv_fork_status ibv_is_fork_initialized(void) {
  using Status = decltype(&ibv_is_fork_initialized);
  static const auto real = reinterpret_cast<Status>(
      softverbs::provider::real_symbol("ibv_is_fork_initialized"));
  const ibv_fork_status status = real ? real() : IBV_FORK_DISABLED;
  if (status == IBV_FORK_UNNEEDED || !real_devices_present()) return IBV_FORK_UNNEEDED;
  return status;
}
