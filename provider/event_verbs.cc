// Asynchronous events of a context.
#include "provider/exports.h"
#include "provider/real_library.h"
#include "provider/soft_context.h"

using namespace softverbs;
using namespace softverbs::provider;

SOFTVERBS_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  if (!context || !event) {
    errno = EINVAL;
    return -1;
  }
  SoftContext* soft = soft_context(context);
  if (!soft) SOFTVERBS_FORWARD(-1, ibv_get_async_event, context, event);
  if (softverbs::Errno err = soft->async_events.next_event(*event)) {
    errno = err;
    return -1;
  }
  return 0;
}

SOFTVERBS_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
  if (!event) return;
  const ibv_event_type type = event->event_type;
  if (is_qp_event(type) && event->element.qp && is_soft(event->element.qp->context)) {
    ibv_qp* qp = event->element.qp;
    pthread_mutex_lock(&qp->mutex);
    ++qp->events_completed;
    pthread_cond_signal(&qp->cond);
    pthread_mutex_unlock(&qp->mutex);
    return;
  }
  if (is_cq_event(type) && event->element.cq && is_soft(event->element.cq->context)) {
    ibv_cq* cq = event->element.cq;
    pthread_mutex_lock(&cq->mutex);
    ++cq->async_events_completed;
    pthread_cond_signal(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
    return;
  }
  if (is_srq_event(type) && event->element.srq && is_soft(event->element.srq->context)) {
    ibv_srq* srq = event->element.srq;
    pthread_mutex_lock(&srq->mutex);
    ++srq->events_completed;
    pthread_cond_signal(&srq->cond);
    pthread_mutex_unlock(&srq->mutex);
    return;
  }
  // Port and device events need no acknowledgement bookkeeping; events of
  // other devices go to the real library.
  SOFTVERBS_FORWARD_VOID(ibv_ack_async_event, event);
}
