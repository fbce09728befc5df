// The system's libibverbs, reached for every object that is not a soft one.
//
// Functions come from dlopen("libibverbs.so.1") + dlvsym(name, node), never
// from RTLD_NEXT: a program such as pyverbs loads libibverbs RTLD_LOCAL from
// inside a dlopen'ed module, where RTLD_NEXT finds nothing. The node asked for
// is the one the installed library exports the name at (generated at
// configure time), which is also the node libsoftverbs.so exports it at.
// Under `softverbs run` the name libibverbs.so.1 resolves to softverbs' shim,
// so the library is opened by the path in SOFTVERBS_REAL_LIBIBVERBS.
#pragma once

#include <cerrno>

namespace softverbs::provider {

// The real definition of `name` at its public (or, for ibv_query_gid_type,
// private) node; nullptr when the library or the symbol cannot be found.
// Thread-safe; the library is opened once, on first use.
void* real_symbol(const char* name);

// Why the real library is unavailable ("" when it is), for diagnostics.
const char* real_library_error();

}  // namespace softverbs::provider

// Resolves the real `name` once per call site (a thread-safe static) and
// calls it with the remaining arguments. When the real library is missing,
// sets errno to ENOSYS and returns `on_missing` from the enclosing function.
#define SOFTVERBS_FORWARD(on_missing, name, ...)                              \
  do {                                                                        \
    static const auto real_fn = reinterpret_cast<decltype(&name)>(            \
        ::softverbs::provider::real_symbol(#name));                           \
    if (!real_fn) {                                                           \
      errno = ENOSYS;                                                         \
      return on_missing;                                                      \
    }                                                                         \
    return real_fn(__VA_ARGS__);                                              \
  } while (0)

// The same for functions that return void.
#define SOFTVERBS_FORWARD_VOID(name, ...)                                     \
  do {                                                                        \
    static const auto real_fn = reinterpret_cast<decltype(&name)>(            \
        ::softverbs::provider::real_symbol(#name));                           \
    if (real_fn) real_fn(__VA_ARGS__);                                        \
    return;                                                                   \
  } while (0)
