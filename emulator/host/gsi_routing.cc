#include "emulator/host/gsi_routing.h"

#include <atomic>

namespace softverbs {
namespace {

std::atomic<GsiRouter> g_router{nullptr};

}  // namespace

void install_gsi_router(GsiRouter router) { g_router.store(router); }

GsiRouter installed_gsi_router() { return g_router.load(); }

}  // namespace softverbs
