// Frames between two QPs of one process skip the wire. The sending thread
// keeps a copy and delivers it itself as soon as it holds no QP lock (when
// the verb that sent it lets go of its QP: QpMutex::unlock), with no
// mailbox, intake lock or doorbell on the way. Threads whose QPs talk to
// each other within the process thus share nothing but the QPs and CQs they
// use, and what the delivery sends back (an ACK, a READ response) is kept
// and delivered in the same pass.
//
// Which way a frame goes depends only on where its destination QP is
// (Engine::send_frame), so every frame to a QP takes the same way, from
// whatever entry point sent it, and keeps its order.
#pragma once

#include <cstdint>
#include <span>

namespace softverbs {

class Engine;

class LocalDelivery {
 public:
  // Keeps a copy of `frame`, to a QP of `engine`. Delivered when this
  // thread lets go of its last QP lock; at once when it holds none.
  static void keep(Engine& engine, std::span<const uint8_t> frame);

  // Delivers what this thread kept, in order, including what the deliveries
  // themselves keep meanwhile. Called with no QP lock held; does nothing
  // when called again from inside a delivery (the outer pass goes on).
  static void deliver_kept() {
    if (has_kept_) deliver_all();
  }

 private:
  static void deliver_all();
  [[gnu::tls_model("initial-exec")]] static inline thread_local bool has_kept_ = false;
};

}  // namespace softverbs
