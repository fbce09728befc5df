// The soft objects behind the verbs ABI's structs, and how to recognise them.
//
// Each wrapper embeds its ibv_* struct first, so the pointer handed to the
// application converts back to the wrapper with a cast. An object is soft
// when its context is soft; a context is soft when its device is one of the
// soft ibv_device structs (a pointer range check, see device_list.h).
#pragma once

#include <infiniband/verbs.h>
#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "emulator/host/device_config.h"
#include "emulator/objects/hca.h"
#include "provider/send_wr_batch.h"
#include "provider/upstream_verbs.h"

namespace softverbs::provider {

struct SoftContext;

struct SoftDevice {
  ibv_device ibv;
  DeviceDescription description;
};

// A thread domain (ibv_alloc_td): a promise of the application that one
// thread at a time uses what is created on it (parent_domain.h says what
// softverbs does with it).
struct SoftTd {
  ibv_td ibv;
  std::atomic<uint32_t> parent_domains{0};
};

// A protection domain, or a parent domain (ibv_alloc_parent_domain), which
// stands for the protection domain `protection` and adds a thread domain
// and the application's allocators.
struct SoftPd {
  ibv_pd ibv;
  std::unique_ptr<Pd> pd;  // a protection domain's; null in a parent domain
  SoftPd* protection = nullptr;
  SoftTd* td = nullptr;
  void* (*alloc)(ibv_pd*, void*, size_t, size_t, uint64_t) = nullptr;
  void (*free)(ibv_pd*, void*, void*, uint64_t) = nullptr;
  void* pd_context = nullptr;
  std::atomic<uint32_t> users{0};  // a parent domain's QPs, CQs and SRQs
  bool is_parent_domain() const { return protection != nullptr; }
  // The protection domain that objects made on this one belong to.
  Pd& protection_domain() { return is_parent_domain() ? *protection->pd : *pd; }
};

// Where a QP, CQ or SRQ object came from (parent_domain.h): the parent
// domain it was made on, if any, and whether its memory is the domain's.
struct ObjectOrigin {
  SoftPd* domain = nullptr;
  bool from_allocator = false;
  uint64_t resource_type = 0;
};

struct SoftMr {
  ibv_mr ibv;
  std::unique_ptr<Mr> mr;
};

struct SoftMw {
  ibv_mw ibv;
  std::unique_ptr<Mw> mw;
};

struct SoftDm {
  ibv_dm ibv;
  std::unique_ptr<DeviceMemory> dm;
};

struct SoftCompChannel;

struct SoftCq {
  // ibv_cq_ex begins with exactly the members of ibv_cq, which is how
  // verbs.h's ibv_cq_ex_to_cq is a cast; the extended members are used by
  // CQs from ibv_create_cq_ex only. ibv_ex first, so SoftCq{} zeroes it all.
  union {
    ibv_cq_ex ibv_ex;
    ibv_cq ibv;
  };
  std::unique_ptr<Cq> cq;
  SoftCompChannel* channel = nullptr;
  ObjectOrigin origin;
  // Events handed out by ibv_get_cq_event / ibv_get_async_event. Incremented
  // under the event queue's lock; destroy waits until the application has
  // acknowledged as many (ibv.comp_events_completed, async_events_completed).
  uint32_t comp_events_delivered = 0;
  uint32_t async_events_delivered = 0;
  // The completion ibv_start_poll / ibv_next_poll is at (cq_ex_verbs.cc),
  // guarded by `iterating`, which is held from a successful ibv_start_poll
  // to ibv_end_poll so threads polling one CQ take turns, as rdma-core's
  // providers make them.
  Completion polled{};
  std::mutex iterating;
};

struct SoftAh {
  ibv_ah ibv;
  std::unique_ptr<Ah> ah;
};

struct SoftXrcd {
  ibv_xrcd ibv;
  std::shared_ptr<Xrcd> xrcd;
  bool opened_on_file = false;
};

struct SoftSrq {
  ibv_srq ibv;
  std::unique_ptr<Srq> srq;
  std::shared_ptr<Xrcd> xrcd;  // an XRC SRQ keeps its domain
  uint32_t async_events_delivered = 0;  // see SoftCq; acked in ibv.events_completed
  ObjectOrigin origin;
};

struct SoftQp {
  // ibv_qp_ex begins with the ibv_qp (qp_base); its builders are used by
  // QPs from ibv_create_qp_ex with send ops only. ibv_ex first, so SoftQp{}
  // zeroes it all.
  union {
    ibv_qp_ex ibv_ex;
    ibv_qp ibv;
  };
  // The member rdma-core 47 added to struct ibv_qp_ex after wr_atomic_write
  // (upstream_verbs.h): right behind it, where newer programs look.
  WrFlushFunction wr_flush = nullptr;
  // Shared by the handles of an XRC target QP (ibv_open_qp); one owner
  // for every other QP.
  std::shared_ptr<Qp> qp;
  std::shared_ptr<Xrcd> xrcd;  // an XRC target keeps its domain
  bool opened = false;         // a handle from ibv_open_qp
  bool sq_sig_all = false;
  uint32_t async_events_delivered = 0;  // see SoftCq; acked in ibv.events_completed
  // The WRs the ibv_wr_* builders assemble; only on a QP that has an
  // ibv_qp_ex (ibv_qp_to_qp_ex returns NULL for the others).
  std::unique_ptr<SendWrBatch> send_wr_batch;
  ObjectOrigin origin;
};

bool is_soft_device(const ibv_device* device);
SoftDevice* soft_device(ibv_device* device);  // nullptr when not soft

// nullptr when `context` is null or not soft.
SoftContext* soft_context(ibv_context* context);

inline bool is_soft(const ibv_context* context) {
  return context && is_soft_device(context->device);
}

// The wrapper of an ibv_* struct whose context is known to be soft.
// The wrappers are not standard-layout (they own C++ objects), but GCC lays
// the first member at offset 0 all the same; the assertion holds it to that.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
template <class Soft, class Ibv>
Soft* soft_of(Ibv* object) {
  static_assert(offsetof(Soft, ibv) == 0, "the ibv struct comes first");
  return reinterpret_cast<Soft*>(object);
}
#pragma GCC diagnostic pop

}  // namespace softverbs::provider
