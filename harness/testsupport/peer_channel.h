// The parent's and the forked child's line to each other: a socketpair made
// before fork(), carrying framed messages (endpoint info, go/ready signals)
// and finally the child's outcome. Every receive is bounded by the run's
// deadline, so a silent peer fails the test instead of hanging it.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "harness/testsupport/errors.h"
#include "harness/testsupport/peer_outcome.h"

namespace softverbs::testsupport {

class PeerChannel {
 public:
  using Clock = std::chrono::steady_clock;

  // Takes ownership of `fd`.
  PeerChannel(int fd, Clock::time_point deadline);
  ~PeerChannel();
  PeerChannel(const PeerChannel&) = delete;
  PeerChannel& operator=(const PeerChannel&) = delete;

  // Sends / receives one value of a trivially copyable type. receive()
  // returns EPROTO on a size mismatch, EPIPE when the peer closed,
  // ETIMEDOUT at the deadline, and ECANCELED when the peer sent its final
  // outcome instead (see peer_outcome()).
  template <class T>
  Errno send(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    return send_frame(FrameKind::kData, &value, sizeof value);
  }
  template <class T>
  Errno receive(T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    return receive_data(&value, sizeof value);
  }

  Errno send_text(std::string_view text);
  Errno receive_text(std::string& text);

  // The child's last message.
  Errno send_outcome(const PeerOutcome& outcome);
  // Skips data frames until the outcome arrives (or the deadline passes).
  Errno receive_outcome(PeerOutcome& outcome);

  // Tells the peer nothing more will come; its pending receive sees EPIPE.
  void finish_sending();

  // The outcome the peer sent while data was expected, if it did.
  const std::optional<PeerOutcome>& peer_outcome() const { return peer_outcome_; }

  // A failure text for `err` from send/receive, naming the peer's own
  // failure when that is the cause.
  std::string explain(Errno err) const;

  Clock::time_point deadline() const { return deadline_; }

 private:
  enum class FrameKind : uint32_t { kData = 1, kOutcomePassed = 2, kOutcomeFailed = 3 };

  Errno send_frame(FrameKind kind, const void* payload, size_t length);
  Errno receive_frame(FrameKind& kind, std::string& payload);
  Errno receive_data(void* out, size_t length);
  Errno write_all(const void* data, size_t length);
  Errno read_all(void* data, size_t length);

  int fd_;
  Clock::time_point deadline_;
  std::optional<PeerOutcome> peer_outcome_;
};

}  // namespace softverbs::testsupport
