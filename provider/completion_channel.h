// A completion channel: the CompletionEventSink of the CQs created on it, and
// the eventfd the application reads (through ibv_get_cq_event) or polls.
#pragma once

#include <infiniband/verbs.h>

#include <mutex>
#include <unordered_map>

#include "emulator/objects/hca.h"
#include "provider/event_fd_queue.h"
#include "provider/objects.h"

namespace softverbs::provider {

class CompletionChannel final : public CompletionEventSink {
 public:
  // `hca`: the device of the channel's context, whose intake a thread
  // blocked in next_event() serves while it waits.
  Errno open(Hca& hca) {
    hca_ = &hca;
    return events_.open();
  }
  int fd() const { return events_.fd(); }

  // Routes the events of `cq` to `soft`. May throw std::bad_alloc.
  void attach(const Cq& cq, SoftCq& soft);
  // Stops routing `cq`'s events and drops those not yet handed out. Call
  // before the emulator's Cq is destroyed.
  void detach(const Cq& cq, SoftCq& soft);

  // Engine lock held: only record and signal.
  void on_completion_event(Cq& cq) override;

  // The next CQ with an event (counted as delivered on it); blocks unless the
  // application set O_NONBLOCK on fd() (then EAGAIN).
  Errno next_event(SoftCq*& out);

 private:
  std::mutex cqs_mutex_;  // before events_' own lock
  std::unordered_map<const Cq*, SoftCq*> cqs_;
  EventFdQueue<SoftCq*> events_;
  Hca* hca_ = nullptr;
};

struct SoftCompChannel {
  ibv_comp_channel ibv;
  CompletionChannel events;
};

}  // namespace softverbs::provider
