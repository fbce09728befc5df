// Completion channels and completion queues.
#include <algorithm>
#include <cstddef>
#include <new>
#include <span>

#include "provider/completion_channel.h"
#include "provider/exports.h"
#include "provider/parent_domain.h"
#include "provider/real_library.h"
#include "provider/soft_context.h"
#include "provider/translate.h"

namespace softverbs::provider {
namespace {

// Completions move from the HCA to the caller's ibv_wc array through this
// many stack slots at a time.
constexpr size_t kPollBatch = 16;

int poll_into(Cq& hca_cq, int num_entries, ibv_wc* wc) {
  // Raw bytes, not Completion[kPollBatch]: a busy-polling caller that finds
  // nothing should not pay for zeroing the slots. Completion is an
  // aggregate, so the bytes hold Completions as soon as the HCA writes them.
  alignas(Completion) std::byte storage[sizeof(Completion) * kPollBatch];
  Completion* batch = std::launder(reinterpret_cast<Completion*>(storage));
  int polled = 0;
  while (polled < num_entries) {
    const size_t want = std::min<size_t>(kPollBatch, static_cast<size_t>(num_entries - polled));
    const int got = hca_cq.poll(std::span<Completion>(batch, want));
    if (got < 0) return polled > 0 ? polled : -1;  // CQ overrun: the CQ is in error
    for (int i = 0; i < got; ++i) to_ibv_wc(batch[i], wc[polled + i]);
    polled += got;
    if (static_cast<size_t>(got) < want) break;
  }
  return polled;
}

}  // namespace

int soft_poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  if (num_entries <= 0) return num_entries == 0 ? 0 : -1;
  try {
    return poll_into(*soft_of<SoftCq>(cq)->cq, num_entries, wc);
  } catch (...) {
    return -1;  // the caller is C
  }
}

int soft_req_notify_cq(ibv_cq* cq, int solicited_only) {
  Cq& hca_cq = *soft_of<SoftCq>(cq)->cq;
  return errno_on_exception([&] { return hca_cq.arm(solicited_only != 0); }, ENOMEM);
}

namespace {

// Reports the CQ's completion events to `channel` (and counts it as a user).
void attach_channel(SoftContext& context, SoftCq& cq, SoftCompChannel& channel) {
  try {
    channel.events.attach(*cq.cq, cq);
  } catch (...) {
    std::lock_guard lock(context.objects.mutex);
    context.objects.cqs.erase(cq.cq.get());
    throw;
  }
  cq.channel = &channel;
  pthread_mutex_lock(&context.ibv()->mutex);
  ++channel.ibv.refcnt;
  pthread_mutex_unlock(&context.ibv()->mutex);
}

void fill_ibv_cq(ibv_cq& ibv, ibv_context* context, ibv_comp_channel* channel,
                 void* cq_context, uint32_t capacity) {
  ibv.context = context;
  ibv.channel = channel;
  ibv.cq_context = cq_context;
  ibv.handle = 0;
  ibv.cqe = static_cast<int>(capacity);
  pthread_mutex_init(&ibv.mutex, nullptr);
  pthread_cond_init(&ibv.cond, nullptr);
  ibv.comp_events_completed = 0;
  ibv.async_events_completed = 0;
}

}  // namespace

SoftCq* create_soft_cq(SoftContext& context, uint32_t cqe, void* cq_context,
                       ibv_comp_channel* channel, uint32_t stamps, SoftPd* parent_domain) {
  if (channel && channel->context != context.ibv()) {
    errno = EINVAL;
    return nullptr;
  }
  SoftCompChannel* soft_channel = channel ? soft_of<SoftCompChannel>(channel) : nullptr;
  return errno_on_exception(
      [&]() -> SoftCq* {
        SoftObjectPtr<SoftCq> cq(new_soft_object<SoftCq>(parent_domain, kResourceTypeCq));
        if (!cq) return nullptr;
        Errno err = 0;
        cq->cq = context.hca->create_cq(cqe, soft_channel ? &soft_channel->events : nullptr,
                                        err, stamps);
        if (!cq->cq) {
          errno = err ? err : ENOMEM;
          return nullptr;
        }
        {
          std::lock_guard lock(context.objects.mutex);
          context.objects.cqs.emplace(cq->cq.get(), cq.get());
        }
        if (soft_channel) attach_channel(context, *cq, *soft_channel);
        fill_ibv_cq(cq->ibv, context.ibv(), channel, cq_context, cq->cq->capacity());
        return cq.release();
      },
      static_cast<SoftCq*>(nullptr));
}

void destroy_soft_cq(SoftContext& context, SoftCq* cq, bool wait_for_acks) {
  {
    std::lock_guard lock(context.objects.mutex);
    context.objects.cqs.erase(cq->cq.get());
  }
  context.async_events.forget(&cq->ibv);
  if (cq->channel) cq->channel->events.detach(*cq->cq, *cq);
  cq->cq.reset();
  ibv_cq& ibv = cq->ibv;
  if (wait_for_acks) {
    // ibv_destroy_cq(3): wait until every event handed out is acknowledged.
    pthread_mutex_lock(&ibv.mutex);
    while (ibv.comp_events_completed != cq->comp_events_delivered ||
           ibv.async_events_completed != cq->async_events_delivered)
      pthread_cond_wait(&ibv.cond, &ibv.mutex);
    pthread_mutex_unlock(&ibv.mutex);
  }
  if (cq->channel) {
    pthread_mutex_lock(&context.ibv()->mutex);
    --cq->channel->ibv.refcnt;
    pthread_mutex_unlock(&context.ibv()->mutex);
  }
  pthread_cond_destroy(&ibv.cond);
  pthread_mutex_destroy(&ibv.mutex);
  delete_soft_object(cq);
}

}  // namespace softverbs::provider

using namespace softverbs;
using namespace softverbs::provider;

SOFTVERBS_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  if (!context) {
    errno = EINVAL;
    return nullptr;
  }
  if (!is_soft(context)) SOFTVERBS_FORWARD(nullptr, ibv_create_comp_channel, context);
  return errno_on_exception(
      [&]() -> ibv_comp_channel* {
        std::unique_ptr<SoftCompChannel> channel(new SoftCompChannel{});
        if (Errno err = channel->events.open(*soft_context(context)->hca)) {
          errno = err;
          return nullptr;
        }
        channel->ibv.context = context;
        channel->ibv.fd = channel->events.fd();
        channel->ibv.refcnt = 0;
        return &channel.release()->ibv;
      },
      static_cast<ibv_comp_channel*>(nullptr));
}

SOFTVERBS_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  if (!channel) return EINVAL;
  ibv_context* context = channel->context;
  if (!is_soft(context)) SOFTVERBS_FORWARD(ENOSYS, ibv_destroy_comp_channel, channel);
  pthread_mutex_lock(&context->mutex);
  const bool in_use = channel->refcnt != 0;
  pthread_mutex_unlock(&context->mutex);
  if (in_use) return EBUSY;  // CQs still report to it
  delete soft_of<SoftCompChannel>(channel);  // closes the fd
  return 0;
}

SOFTVERBS_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                                       ibv_comp_channel* channel, int comp_vector) {
  if (!context) {
    errno = EINVAL;
    return nullptr;
  }
  SoftContext* soft = soft_context(context);
  if (!soft)
    SOFTVERBS_FORWARD(nullptr, ibv_create_cq, context, cqe, cq_context, channel,
                      comp_vector);
  if (cqe <= 0 || comp_vector < 0 || comp_vector >= context->num_comp_vectors) {
    errno = EINVAL;
    return nullptr;
  }
  SoftCq* cq = create_soft_cq(*soft, static_cast<uint32_t>(cqe), cq_context, channel, 0);
  return cq ? &cq->ibv : nullptr;
}

SOFTVERBS_EXPORT int ibv_resize_cq(ibv_cq* cq, int cqe) {
  if (!cq) return EINVAL;
  if (!is_soft(cq->context)) SOFTVERBS_FORWARD(ENOSYS, ibv_resize_cq, cq, cqe);
  if (cqe <= 0) return EINVAL;
  Cq& hca_cq = *soft_of<SoftCq>(cq)->cq;
  if (Errno err = errno_on_exception(
          [&] { return hca_cq.resize(static_cast<uint32_t>(cqe)); }, ENOMEM))
    return err;
  // ibv_resize_cq(3): cq->cqe tells the caller the size it got.
  cq->cqe = static_cast<int>(hca_cq.capacity());
  return 0;
}

SOFTVERBS_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  if (!cq) return EINVAL;
  SoftContext* context = soft_context(cq->context);
  if (!context) SOFTVERBS_FORWARD(ENOSYS, ibv_destroy_cq, cq);
  SoftCq* soft = soft_of<SoftCq>(cq);
  if (soft->cq->users.load() != 0) return EBUSY;  // a QP still reports to it
  destroy_soft_cq(*context, soft, true);
  return 0;
}

SOFTVERBS_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq,
                                      void** cq_context) {
  if (!channel || !cq || !cq_context) {
    errno = EINVAL;
    return -1;
  }
  if (!is_soft(channel->context))
    SOFTVERBS_FORWARD(-1, ibv_get_cq_event, channel, cq, cq_context);
  SoftCq* soft = nullptr;
  if (Errno err = soft_of<SoftCompChannel>(channel)->events.next_event(soft)) {
    errno = err;
    return -1;
  }
  *cq = &soft->ibv;
  *cq_context = soft->ibv.cq_context;
  return 0;
}

SOFTVERBS_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  if (!cq) return;
  if (!is_soft(cq->context)) SOFTVERBS_FORWARD_VOID(ibv_ack_cq_events, cq, nevents);
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}
