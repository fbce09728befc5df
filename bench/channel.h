// Fixed-size messages between the benchmark process and its peer process,
// over a socketpair made before fork. Every wait is bounded, so a peer that
// dies or hangs makes a call fail instead of hanging the benchmark.
#pragma once

#include <chrono>
#include <cstddef>
#include <type_traits>

namespace softverbs::bench {

class Channel {
 public:
  Channel() = default;
  explicit Channel(int fd) : fd_(fd) {}
  Channel(Channel&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Channel& operator=(Channel&& other) noexcept;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  ~Channel();

  bool valid() const { return fd_ >= 0; }

  // False when the other side is gone or `timeout` passed.
  bool send_bytes(const void* data, std::size_t size);
  bool receive_bytes(void* data, std::size_t size, std::chrono::milliseconds timeout);

  template <typename Message>
  bool send(const Message& message) {
    static_assert(std::is_trivially_copyable_v<Message>);
    return send_bytes(&message, sizeof message);
  }
  template <typename Message>
  bool receive(Message& message, std::chrono::milliseconds timeout) {
    static_assert(std::is_trivially_copyable_v<Message>);
    return receive_bytes(&message, sizeof message, timeout);
  }

 private:
  int fd_ = -1;
};

}  // namespace softverbs::bench
