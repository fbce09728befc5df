// A context's asynchronous events: the AsyncEventSink its Hca reports to,
// and the eventfd behind ibv_context::async_fd.
#pragma once

#include <infiniband/verbs.h>

#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "emulator/objects/hca.h"
#include "provider/event_fd_queue.h"
#include "provider/objects.h"

namespace softverbs::provider {

// The live objects of one context: what the async events name, and what
// ibv_close_device tears down if the application left it behind.
struct ContextObjects {
  std::mutex mutex;  // taken before the event queue's own lock
  std::unordered_set<SoftPd*> pds;
  std::unordered_set<SoftMr*> mrs;
  std::unordered_map<const Cq*, SoftCq*> cqs;
  std::unordered_map<const Qp*, SoftQp*> qps;
  std::unordered_map<const Srq*, SoftSrq*> srqs;
  std::unordered_set<SoftAh*> ahs;
  std::unordered_set<SoftXrcd*> xrcds;
  std::unordered_set<SoftQp*> opened_qps;  // ibv_open_qp handles: no events
  std::unordered_set<SoftDm*> dms;
  std::unordered_set<SoftMw*> mws;
  std::unordered_set<SoftTd*> tds;
};

bool is_qp_event(ibv_event_type type);
bool is_cq_event(ibv_event_type type);
bool is_srq_event(ibv_event_type type);

class AsyncEventQueue final : public AsyncEventSink {
 public:
  explicit AsyncEventQueue(ContextObjects& objects) : objects_(objects) {}

  Errno open() { return events_.open(); }
  int fd() const { return events_.fd(); }

  // Engine lock held: translate, record, signal.
  void on_async_event(const AsyncEvent& event) override;

  // The next event (counted as delivered on its QP or CQ); blocks unless the
  // application set O_NONBLOCK on fd() (then EAGAIN).
  Errno next_event(ibv_async_event& out);

  // Drops the events of a QP or CQ not yet handed out.
  void forget(const ibv_qp* qp);
  void forget(const ibv_cq* cq);
  void forget(const ibv_srq* srq);

 private:
  ContextObjects& objects_;
  EventFdQueue<ibv_async_event> events_;
};

}  // namespace softverbs::provider
