#include "harness/testsupport/async_events.h"

#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <cstdio>

namespace softverbs::testsupport {
namespace {

using Clock = std::chrono::steady_clock;

bool names_a_qp(ibv_event_type type) {
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

bool names_a_port(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
      return true;
    default:
      return false;
  }
}

}  // namespace

Errno make_async_fd_nonblocking(ibv_context* context) {
  const int flags = fcntl(context->async_fd, F_GETFL);
  if (flags < 0) return errno;
  if (fcntl(context->async_fd, F_SETFL, flags | O_NONBLOCK) < 0) return errno;
  return 0;
}

bool async_fd_readable(ibv_context* context, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd pfd{context->async_fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (ready > 0) return (pfd.revents & POLLIN) != 0;
    if (ready < 0 && errno == EINTR) continue;
    return false;
  }
}

std::optional<AsyncEventRecord> next_async_event(ibv_context* context,
                                                 std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (!async_fd_readable(context, std::max(left, std::chrono::milliseconds(0))))
      return std::nullopt;
    ibv_async_event event{};
    if (ibv_get_async_event(context, &event) != 0) {
      // Readable but taken by nobody else: EAGAIN can only be a spurious
      // wake-up. Try again until the deadline.
      if (Clock::now() >= deadline) return std::nullopt;
      continue;
    }
    AsyncEventRecord record;
    record.type = event.event_type;
    if (names_a_qp(event.event_type) && event.element.qp) record.qp_num = event.element.qp->qp_num;
    if (names_a_port(event.event_type)) record.port = static_cast<uint8_t>(event.element.port_num);
    ibv_ack_async_event(&event);
    return record;
  }
}

std::optional<AsyncEventRecord> wait_for_async_event(ibv_context* context, ibv_event_type type,
                                                     uint32_t qp_num,
                                                     std::chrono::milliseconds timeout,
                                                     std::vector<AsyncEventRecord>* others) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() < 0) return std::nullopt;
    std::optional<AsyncEventRecord> event = next_async_event(context, left);
    if (!event) return std::nullopt;
    const bool qp_matches = qp_num == 0 || !names_a_qp(type) || event->qp_num == qp_num;
    if (event->type == type && qp_matches) return event;
    if (others) others->push_back(*event);
  }
}

std::string describe_async_event(const AsyncEventRecord& event) {
  char text[96];
  if (names_a_qp(event.type)) {
    std::snprintf(text, sizeof text, "%s on QP 0x%x", ibv_event_type_str(event.type),
                  event.qp_num);
  } else if (names_a_port(event.type)) {
    std::snprintf(text, sizeof text, "%s on port %u", ibv_event_type_str(event.type), event.port);
  } else {
    std::snprintf(text, sizeof text, "%s", ibv_event_type_str(event.type));
  }
  return text;
}

}  // namespace softverbs::testsupport
