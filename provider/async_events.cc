#include "provider/async_events.h"

#include "provider/translate.h"

namespace softverbs::provider {

bool is_qp_event(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      return true;
    default:
      return false;
  }
}

bool is_cq_event(ibv_event_type type) { return type == IBV_EVENT_CQ_ERR; }

bool is_srq_event(ibv_event_type type) {
  return type == IBV_EVENT_SRQ_ERR || type == IBV_EVENT_SRQ_LIMIT_REACHED;
}

void AsyncEventQueue::on_async_event(const AsyncEvent& event) {
  ibv_async_event out{};
  if (!to_ibv_event_type(event.type, out.event_type)) return;
  std::lock_guard lock(objects_.mutex);
  if (is_qp_event(out.event_type)) {
    auto it = objects_.qps.find(event.qp);
    if (it == objects_.qps.end()) return;  // the QP is being destroyed
    out.element.qp = &it->second->ibv;
  } else if (is_cq_event(out.event_type)) {
    auto it = objects_.cqs.find(event.cq);
    if (it == objects_.cqs.end()) return;
    out.element.cq = &it->second->ibv;
  } else if (is_srq_event(out.event_type)) {
    auto it = objects_.srqs.find(event.srq);
    if (it == objects_.srqs.end()) return;
    out.element.srq = &it->second->ibv;
  } else {
    out.element.port_num = event.port;
  }
  events_.push(out);
}

Errno AsyncEventQueue::next_event(ibv_async_event& out) {
  return events_.pop(out, [](const ibv_async_event& event) {
    if (is_qp_event(event.event_type))
      ++soft_of<SoftQp>(event.element.qp)->async_events_delivered;
    else if (is_cq_event(event.event_type))
      ++soft_of<SoftCq>(event.element.cq)->async_events_delivered;
    else if (is_srq_event(event.event_type))
      ++soft_of<SoftSrq>(event.element.srq)->async_events_delivered;
  });
}

void AsyncEventQueue::forget(const ibv_qp* qp) {
  events_.remove_if([qp](const ibv_async_event& event) {
    return is_qp_event(event.event_type) && event.element.qp == qp;
  });
}

void AsyncEventQueue::forget(const ibv_cq* cq) {
  events_.remove_if([cq](const ibv_async_event& event) {
    return is_cq_event(event.event_type) && event.element.cq == cq;
  });
}

void AsyncEventQueue::forget(const ibv_srq* srq) {
  events_.remove_if([srq](const ibv_async_event& event) {
    return is_srq_event(event.event_type) && event.element.srq == srq;
  });
}

}  // namespace softverbs::provider
