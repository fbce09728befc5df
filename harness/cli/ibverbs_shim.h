// What `softverbs run` preloads besides libsoftverbs.so so that a program
// which dlopen()s "libibverbs.so.1" itself (NCCL, plugin loaders, ctypes)
// reaches the soft devices too: the libibverbs.so.1 shim built beside
// libsoftverbs.so (provider/ibverbs_shim.c), then the system's
// libibverbs.so.1 by its path, whose private symbols rdma-core's providers
// need.
#pragma once

#include <string>

namespace softverbs::cli {

struct IbverbsShim {
  std::string shim_path;  // <dir of libsoftverbs.so>/ibverbs-shim/libibverbs.so.1
  std::string real_path;  // the system's libibverbs.so.1; empty when absent
  std::string problem;    // why the shim is not used ("" when it is)
};

// Finds both files for `provider_library` (an absolute path). The system
// library is the file the dynamic loader picks for "libibverbs.so.1" in this
// environment, or SOFTVERBS_REAL_LIBIBVERBS when a `softverbs run` above us
// already named it. SOFTVERBS_IBVERBS_SHIM=0 turns the shim off.
IbverbsShim find_ibverbs_shim(const std::string& provider_library);

}  // namespace softverbs::cli
