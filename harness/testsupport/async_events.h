// Waiting for asynchronous events (ibv_get_async_event(3)) without ever
// waiting forever: the context's async_fd is made non-blocking and watched
// with poll(2), which the man page promises works on it.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/testsupport/errors.h"

namespace softverbs::testsupport {

// One event as received, already acknowledged (ibv_ack_async_event), so the
// object it names can be destroyed. Plain data: it crosses a socket as is.
struct AsyncEventRecord {
  ibv_event_type type = IBV_EVENT_DEVICE_FATAL;
  uint32_t qp_num = 0;  // QP events: element.qp->qp_num
  uint8_t port = 0;     // port events: element.port_num
};

// Sets O_NONBLOCK on context->async_fd (ibv_get_async_event(3) shows how).
Errno make_async_fd_nonblocking(ibv_context* context);

// poll(2) on the async fd: true when an event is ready within `timeout`.
bool async_fd_readable(ibv_context* context, std::chrono::milliseconds timeout);

// The next event, if one arrives within `timeout`. The fd must be
// non-blocking (make_async_fd_nonblocking).
std::optional<AsyncEventRecord> next_async_event(ibv_context* context,
                                                 std::chrono::milliseconds timeout);

// Waits for an event of `type` (and, for QP events, on `qp_num` when it is
// non-zero); events of other kinds that come first are appended to `others`.
std::optional<AsyncEventRecord> wait_for_async_event(ibv_context* context, ibv_event_type type,
                                                     uint32_t qp_num,
                                                     std::chrono::milliseconds timeout,
                                                     std::vector<AsyncEventRecord>* others);

// "IBV_EVENT_QP_ACCESS_ERR on QP 0x12", "IBV_EVENT_PORT_ERR on port 1".
std::string describe_async_event(const AsyncEventRecord& event);

}  // namespace softverbs::testsupport
