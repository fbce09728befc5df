// What creating a QP, CQ or SRQ on a parent domain changes
// (ibv_alloc_parent_domain(3) leaves it to the provider):
//  - The provider object behind the handle the application holds (the
//    SoftQp, SoftCq or SoftSrq, which the ibv_qp, ibv_cq or ibv_srq begins)
//    lives in memory from the domain's allocator, when it has one, asked
//    for with the object's size and alignment and one of the resource types
//    below; IBV_ALLOCATOR_USE_DEFAULT takes the heap, NULL fails the create
//    with ENOMEM. It goes back through the domain's free at destroy. The
//    queues themselves are the emulated HCA's memory, as a real HCA's
//    queues are its own, and come from no allocator.
//  - A thread domain changes nothing: a soft QP's and CQ's lock is shared
//    with the device's own progress engine (the part a real HCA does in
//    hardware), so the application's promise of one thread does not make
//    it removable.
#pragma once

#include <cerrno>
#include <memory>
#include <new>

#include "provider/objects.h"

namespace softverbs::provider {

// The resource_type values the allocator receives. Their low 32 bits are
// those of mlx5dv.h's MLX5DV_RES_TYPE_QP, _SRQ and _CQ; the driver part is 0.
inline constexpr uint64_t kResourceTypeQp = 1;
inline constexpr uint64_t kResourceTypeSrq = 4;
inline constexpr uint64_t kResourceTypeCq = 5;

// The parent domain `pd` is, or nullptr for a protection domain (or none).
inline SoftPd* parent_domain_of(ibv_pd* pd) {
  if (!pd) return nullptr;
  SoftPd* soft = soft_of<SoftPd>(pd);
  return soft->is_parent_domain() ? soft : nullptr;
}

// A provider object made on `domain` (or with none: on the heap), holding
// one use of the domain until deleted. nullptr with errno ENOMEM when the
// domain's allocator gave nothing.
template <class Soft>
Soft* new_soft_object(SoftPd* domain, uint64_t resource_type) {
  void* memory = nullptr;
  if (domain && domain->alloc) {
    memory = domain->alloc(&domain->ibv, domain->pd_context, sizeof(Soft), alignof(Soft),
                           resource_type);
    if (!memory) {
      errno = ENOMEM;
      return nullptr;
    }
    if (memory == IBV_ALLOCATOR_USE_DEFAULT) memory = nullptr;
  }
  Soft* object = memory ? new (memory) Soft{} : new Soft{};
  object->origin = ObjectOrigin{domain, memory != nullptr, resource_type};
  if (domain) domain->users.fetch_add(1);
  return object;
}

template <class Soft>
void delete_soft_object(Soft* object) {
  const ObjectOrigin origin = object->origin;
  if (origin.domain) origin.domain->users.fetch_sub(1);
  if (!origin.from_allocator) {
    delete object;
    return;
  }
  object->~Soft();
  origin.domain->free(&origin.domain->ibv, origin.domain->pd_context, object,
                      origin.resource_type);
}

struct SoftObjectDeleter {
  template <class Soft>
  void operator()(Soft* object) const {
    delete_soft_object(object);
  }
};
template <class Soft>
using SoftObjectPtr = std::unique_ptr<Soft, SoftObjectDeleter>;

}  // namespace softverbs::provider
