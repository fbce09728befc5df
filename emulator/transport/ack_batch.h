// Acknowledgements coalesced over a batch of arrived frames. While a thread
// serves a batch (one intake pass, with the intake lock held, so no QP it
// reaches is removed before the batch ends), a responder that would send a
// plain ACK holds it instead: one per QP, each later one replacing the
// earlier, since an ACK acknowledges every PSN up to its own (the IBTA lets
// a responder coalesce them). When the batch ends, each QP sends the
// ACK it holds. A stream of SENDs served together then costs the requester
// one ACK, not one per message. Anything else a responder sends (a NAK, a
// READ response, an atomic ACK) sends its held ACK first, so what goes on
// the wire keeps the order it had.
//
// Completion events raised during the batch are signaled after its ACKs
// have gone. An HCA acknowledges a message as it takes it, long before the
// application woken by the completion can answer; softverbs must not let
// that answer overtake the ACK either. Programs count on it: perftest's
// latency tests in event mode wait on one channel for both of their CQs,
// and take the event of a reply that came first for the send they wait for
// (their send CQ then fills up with completions never polled).
#pragma once

#include <array>
#include <cstddef>

namespace softverbs {

struct QpImpl;
class Cq;
class CompletionEventSink;

class AckBatch {
 public:
  // Opens a batch on this thread; inside one already, that one goes on.
  AckBatch() {
    if (!current_) current_ = this;
  }
  // Each QP that holds an ACK sends it (with its lock taken).
  ~AckBatch();
  AckBatch(const AckBatch&) = delete;
  AckBatch& operator=(const AckBatch&) = delete;

  // The batch open on this thread, or null: ACKs are sent at once then.
  static AckBatch* current() { return current_; }

  // `qp` holds an ACK to send when the batch ends. false when the batch
  // has no room left: the ACK is sent at once.
  bool add(QpImpl& qp) {
    if (count_ == holders_.size()) return false;
    holders_[count_++] = &qp;
    return true;
  }
  // `sink` is told of `cq`'s completion event when the batch ends, after
  // the ACKs. false when the batch has no room left: tell it at once.
  bool defer_event(CompletionEventSink& sink, Cq& cq) {
    if (event_count_ == events_.size()) return false;
    events_[event_count_++] = DeferredEvent{&sink, &cq};
    return true;
  }

 private:
  // More QPs than a pass of intake usually serves; past it, ACKs go at once.
  std::array<QpImpl*, 32> holders_;
  size_t count_ = 0;
  struct DeferredEvent {
    CompletionEventSink* sink;
    Cq* cq;
  };
  std::array<DeferredEvent, 32> events_;
  size_t event_count_ = 0;
  [[gnu::tls_model("initial-exec")]] static inline thread_local AckBatch* current_ = nullptr;
};

}  // namespace softverbs
