// The soft devices of this process: one ibv_device per configured_devices()
// entry, allocated on first use and never freed (a program may keep device
// pointers until exit, and past its static destructors).
#pragma once

#include <span>

#include "provider/objects.h"

namespace softverbs::provider {

std::span<SoftDevice> soft_devices();

}  // namespace softverbs::provider
