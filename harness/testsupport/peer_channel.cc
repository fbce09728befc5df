#include "harness/testsupport/peer_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace softverbs::testsupport {
namespace {

struct FrameHeader {
  uint32_t kind;
  uint32_t length;
};

// Frames beyond this are a protocol error, not something to allocate for.
constexpr uint32_t kMaxFrameLength = 1u << 20;

}  // namespace

PeerChannel::PeerChannel(int fd, Clock::time_point deadline) : fd_(fd), deadline_(deadline) {}

PeerChannel::~PeerChannel() {
  if (fd_ >= 0) close(fd_);
}

Errno PeerChannel::write_all(const void* data, size_t length) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (length > 0) {
    ssize_t n = ::send(fd_, bytes, length, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes += n;
    length -= static_cast<size_t>(n);
  }
  return 0;
}

Errno PeerChannel::read_all(void* data, size_t length) {
  auto* bytes = static_cast<uint8_t*>(data);
  while (length > 0) {
    auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline_ - Clock::now());
    if (remaining.count() <= 0) return ETIMEDOUT;
    pollfd pfd{fd_, POLLIN, 0};
    int ready = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(remaining.count(), 1000)));
    if (ready < 0 && errno != EINTR) return errno;
    if (ready <= 0) continue;
    ssize_t n = ::recv(fd_, bytes, length, 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno;
    }
    if (n == 0) return EPIPE;
    bytes += n;
    length -= static_cast<size_t>(n);
  }
  return 0;
}

Errno PeerChannel::send_frame(FrameKind kind, const void* payload, size_t length) {
  if (length > kMaxFrameLength) return EMSGSIZE;
  FrameHeader header{static_cast<uint32_t>(kind), static_cast<uint32_t>(length)};
  if (Errno err = write_all(&header, sizeof header)) return err;
  return length ? write_all(payload, length) : 0;
}

Errno PeerChannel::receive_frame(FrameKind& kind, std::string& payload) {
  FrameHeader header{};
  if (Errno err = read_all(&header, sizeof header)) return err;
  if (header.length > kMaxFrameLength) return EPROTO;
  payload.resize(header.length);
  if (header.length) {
    if (Errno err = read_all(payload.data(), header.length)) return err;
  }
  kind = static_cast<FrameKind>(header.kind);
  if (kind == FrameKind::kOutcomePassed || kind == FrameKind::kOutcomeFailed) {
    peer_outcome_ = PeerOutcome{kind == FrameKind::kOutcomePassed, payload};
  }
  return 0;
}

Errno PeerChannel::receive_data(void* out, size_t length) {
  FrameKind kind{};
  std::string payload;
  if (Errno err = receive_frame(kind, payload)) return err;
  if (kind != FrameKind::kData) return ECANCELED;
  if (payload.size() != length) return EPROTO;
  std::memcpy(out, payload.data(), length);
  return 0;
}

Errno PeerChannel::send_text(std::string_view text) {
  return send_frame(FrameKind::kData, text.data(), text.size());
}

Errno PeerChannel::receive_text(std::string& text) {
  FrameKind kind{};
  if (Errno err = receive_frame(kind, text)) return err;
  return kind == FrameKind::kData ? 0 : ECANCELED;
}

Errno PeerChannel::send_outcome(const PeerOutcome& outcome) {
  return send_frame(outcome.passed ? FrameKind::kOutcomePassed : FrameKind::kOutcomeFailed,
                    outcome.message.data(), outcome.message.size());
}

Errno PeerChannel::receive_outcome(PeerOutcome& outcome) {
  while (!peer_outcome_) {
    FrameKind kind{};
    std::string payload;
    if (Errno err = receive_frame(kind, payload)) return err;
  }
  outcome = *peer_outcome_;
  return 0;
}

void PeerChannel::finish_sending() { ::shutdown(fd_, SHUT_WR); }

std::string PeerChannel::explain(Errno err) const {
  if (peer_outcome_) {
    return peer_outcome_->passed ? "peer finished early without failure"
                                 : "peer failed: " + peer_outcome_->message;
  }
  if (err == EPIPE) return "peer closed the channel (exited or crashed)";
  if (err == ETIMEDOUT) return "peer did not answer before the deadline";
  return "channel error: " + describe_errno(err);
}

}  // namespace softverbs::testsupport
