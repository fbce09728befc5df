// What every file that defines an interposed libibverbs symbol includes.
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

// verbs.h turns these into inline wrappers; the exported functions carry the
// plain names.
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port

// Everything is hidden (-fvisibility=hidden) except the interposed ABI; the
// version script assigns each name its libibverbs version node.
#define SOFTVERBS_EXPORT extern "C" __attribute__((visibility("default")))

struct ib_uverbs_qp_attr;
struct ib_uverbs_ah_attr;
struct ib_user_path_rec;
struct ibv_sa_path_rec;

// libibverbs exports these, but declares them only in rdma-core's private
// headers (driver.h, marshall.h), which distributions do not install.
extern "C" {
int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size);
const char* ibv_get_sysfs_path(void);
int ibv_dontfork_range(void* base, size_t size);
int ibv_dofork_range(void* base, size_t size);
// `type` is an enum ibv_gid_type_sysfs: 0 = IB or RoCE v1, 1 = RoCE v2.
int ibv_query_gid_type(struct ibv_context* context, uint8_t port_num,
                       unsigned int index, unsigned int* type);
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr* dst, struct ib_uverbs_qp_attr* src);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr* dst, struct ib_uverbs_ah_attr* src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec* dst, struct ib_user_path_rec* src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec* dst, struct ibv_sa_path_rec* src);
}

namespace softverbs::provider {

// Runs `body` and turns an escaping exception (allocation failure) into
// errno + `on_failure`: no C++ exception ever reaches a C caller.
template <class Body, class Result>
Result errno_on_exception(Body&& body, Result on_failure) noexcept {
  try {
    return body();
  } catch (...) {
    errno = ENOMEM;
    return on_failure;
  }
}

}  // namespace softverbs::provider
