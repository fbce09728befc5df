// One QP's protocol trace: what its requester sent, what its completer was
// answered and concluded, and what its responder received and answered,
// one event per line, in the order each did it, without timestamps, so
// that two runs that took the same path write the same files
// (docs/faults.md, Traces). The three write separate files: the order
// between them (an ACK arriving while the requester still sends, our ACK
// against the peer's next SEND) is the host's scheduling, not the
// protocol's path.
//
// Each file is a shared mapping of its own: a line is written into the
// page cache with a memcpy, no system call, and stays there if the process
// is killed (then the file ends in zero bytes after its last line, which
// `softverbs trace diff` reads up to). The file grows by remapping and is
// cut to its length when the QP goes or the process exits.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace softverbs::trace {

enum class Stream : uint8_t { kRequester, kCompleter, kResponder };

class QpTrace {
 public:
  // Writes `<stem>.requester`, `.completer` and `.responder`, each once it
  // has an event.
  explicit QpTrace(std::string stem);
  ~QpTrace();
  QpTrace(const QpTrace&) = delete;
  QpTrace& operator=(const QpTrace&) = delete;

  // One event, its newline included (TraceLine::finished).
  void event(Stream stream, std::string_view line);
  // A requester's event about the request of PSN `psn` (a packet sent, a
  // fault applied to it). It waits until the completer settles it: written
  // once the PSN is acknowledged or the requester goes back to it or
  // before it; forgotten when the requester goes back to an earlier PSN.
  // After a NAK, the packets sent past the lost one before the NAK came
  // (how many depends on the host's timing) are dropped unseen by the
  // responder: the trace leaves them out, so that it shows the path.
  void request_event(uint32_t psn, std::string_view line);
  // Every request before `psn` was acknowledged.
  void settle_requests_before(uint32_t psn);
  // Transmission went back to `psn`.
  void abandon_requests_after(uint32_t psn);
  // Cuts each file to the events it holds (the QP stays traced).
  void finish();

 private:
  struct File {
    std::string path;
    int fd = -1;
    char* map = nullptr;
    size_t mapped = 0;   // bytes mapped (and the file's size meanwhile)
    size_t length = 0;   // bytes of events
    bool failed = false; // could not be written: said once, then silent
  };
  // Room for `bytes` more at the end of `file`: false when there is none.
  bool make_room_locked(File& file, size_t bytes);
  void append_locked(File& file, const char* line, size_t length);
  // Writes the waiting requester lines, oldest first, while settled(psn).
  template <typename Settled>
  void settle_locked(Settled settled);
  // The requester's lines that wait, oldest first, by PSN.
  struct PendingRequest {
    uint32_t psn;
    uint32_t length;  // of its line in pending_text_, newline included
  };
  std::vector<PendingRequest> pending_;
  std::string pending_text_;
  size_t pending_head_ = 0;       // pending_[..head) are written
  size_t pending_text_head_ = 0;  // and so is pending_text_[..this)
  void fail_locked(File& file, const char* what);

  std::mutex mutex_;
  std::array<File, 3> files_;
};

}  // namespace softverbs::trace
