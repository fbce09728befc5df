#include "conformance/cm/cm_events.h"

#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace softverbs::conformance::cm {
namespace {

using Clock = std::chrono::steady_clock;

std::string event_name(rdma_cm_event_type type) {
  return std::string(rdma_event_str(type)) + " (" + std::to_string(type) + ")";
}

CmEvent copy_event(const rdma_cm_event& raw) {
  CmEvent event;
  event.received = true;
  event.type = raw.event;
  event.status = raw.status;
  event.id = raw.id;
  event.listen_id = raw.listen_id;
  const bool ud = raw.id != nullptr && raw.id->qp_type == IBV_QPT_UD;
  const void* data = nullptr;
  uint8_t length = 0;
  if (ud) {
    event.ud = raw.param.ud;
    event.ud_private_data_pointer = raw.param.ud.private_data;
    event.ud.private_data = nullptr;
    if (raw.event != RDMA_CM_EVENT_MULTICAST_JOIN && raw.event != RDMA_CM_EVENT_MULTICAST_ERROR) {
      data = raw.param.ud.private_data;
      length = raw.param.ud.private_data_len;
    }
  } else {
    event.conn = raw.param.conn;
    event.conn.private_data = nullptr;
    data = raw.param.conn.private_data;
    length = raw.param.conn.private_data_len;
  }
  if (data != nullptr && length > 0) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    event.private_data.assign(bytes, bytes + length);
  }
  return event;
}

// Waits for the fd to become readable; 1 readable, 0 timeout, -1 error.
int wait_readable(int fd, Clock::time_point until) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, left.count() > 0 ? static_cast<int>(left.count()) : 0);
    if (ready < 0 && errno == EINTR) continue;
    return ready;
  }
}

}  // namespace

std::string CmEvent::describe() const {
  if (!received) return std::string("no event (") + strerror(error) + ")";
  std::ostringstream out;
  out << event_name(type) << " status " << status << ", private data " << private_data.size()
      << " bytes";
  return out.str();
}

CmEvent next_event(rdma_event_channel* channel, std::chrono::milliseconds timeout) {
  // Non-blocking for the call: librdmacm swallows some kernel events (it
  // reads again), and that second read must not block past the deadline.
  const int flags = fcntl(channel->fd, F_GETFL);
  fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK);
  const auto until = Clock::now() + timeout;
  CmEvent event;
  event.error = ETIMEDOUT;
  for (;;) {
    int ready = wait_readable(channel->fd, until);
    if (ready <= 0) {
      if (ready < 0) event.error = errno;
      break;
    }
    rdma_cm_event* raw = nullptr;
    if (rdma_get_cm_event(channel, &raw) == 0) {
      event = copy_event(*raw);
      rdma_ack_cm_event(raw);
      break;
    }
    if (errno != EAGAIN) {
      event.error = errno;
      break;
    }
  }
  fcntl(channel->fd, F_SETFL, flags);
  return event;
}

::testing::AssertionResult is_event(const CmEvent& event, rdma_cm_event_type type, int status) {
  if (!event.received || event.type != type || event.status != status)
    return ::testing::AssertionFailure() << "got " << event.describe() << ", expected "
                                         << event_name(type) << " status " << status;
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult no_event_within(rdma_event_channel* channel,
                                           std::chrono::milliseconds window) {
  if (wait_readable(channel->fd, Clock::now() + window) == 0) return ::testing::AssertionSuccess();
  CmEvent event = next_event(channel, 0ms);
  return ::testing::AssertionFailure() << "an event arrived within " << window.count()
                                       << " ms: " << event.describe();
}

::testing::AssertionResult is_padded_copy(const std::vector<uint8_t>& data,
                                          const std::vector<uint8_t>& expected) {
  if (data.size() < expected.size())
    return ::testing::AssertionFailure() << data.size() << " bytes, fewer than the "
                                         << expected.size() << " sent";
  for (size_t i = 0; i < data.size(); ++i) {
    const uint8_t want = i < expected.size() ? expected[i] : 0;
    if (data[i] != want)
      return ::testing::AssertionFailure() << "byte " << i << " is " << int(data[i])
                                           << ", expected " << int(want) << " (" << expected.size()
                                           << " bytes sent, then zeros)";
  }
  return ::testing::AssertionSuccess();
}

std::vector<uint8_t> bytes_of(const char* text) {
  return std::vector<uint8_t>(text, text + std::strlen(text));
}

}  // namespace softverbs::conformance::cm
