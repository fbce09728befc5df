// One trace event being written: words and numbers separated by spaces,
// into a buffer on the stack, without printf's parsing or an allocation
// (an event is written per packet).
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace softverbs::trace {

class TraceLine {
 public:
  TraceLine& word(std::string_view text) {
    space();
    const size_t n = std::min(text.size(), kRoom - length_);
    std::memcpy(text_ + length_, text.data(), n);
    length_ += n;
    return *this;
  }
  TraceLine& number(uint64_t value) {
    space();
    const auto [end, ec] = std::to_chars(text_ + length_, text_ + kRoom, value);
    if (ec == std::errc()) length_ = static_cast<size_t>(end - text_);
    return *this;
  }
  // `key=value`, as one word.
  TraceLine& setting(std::string_view key, uint64_t value) {
    word(key);
    return joined('=', value);
  }
  // `separator` and `value` onto the last word: 12+3.
  TraceLine& joined(char separator, uint64_t value) {
    if (length_ < kRoom) text_[length_++] = separator;
    const auto [end, ec] = std::to_chars(text_ + length_, text_ + kRoom, value);
    if (ec == std::errc()) length_ = static_cast<size_t>(end - text_);
    return *this;
  }
  // The event and its newline.
  std::string_view finished() {
    text_[length_] = '\n';
    return {text_, length_ + 1};
  }

 private:
  static constexpr size_t kRoom = 159;  // one more for the newline
  void space() {
    if (length_ && length_ < kRoom) text_[length_++] = ' ';
  }
  char text_[kRoom + 1];
  size_t length_ = 0;
};

}  // namespace softverbs::trace
