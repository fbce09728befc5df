/* The libibverbs.so.1 shim: a library with libibverbs' soname and version
 * nodes, no code of its own, and libsoftverbs.so as its one dependency.
 *
 * `softverbs run` preloads it, so that every later lookup of the name
 * "libibverbs.so.1" (a program's or a provider's DT_NEEDED, and a
 * dlopen("libibverbs.so.1") such as NCCL's) resolves to it instead of the
 * system library. dlsym() and dlvsym() on its handle search it and then its
 * dependencies, so they find libsoftverbs.so's definitions, at the same
 * version nodes. The system library is preloaded after it, so its private
 * symbols (IBVERBS_PRIVATE_<N>, used by rdma-core's providers) still resolve.
 *
 * The version script (ibverbs_shim.map) is generated from the installed
 * library; the nodes are empty and exist only for ld.so's version check. */
