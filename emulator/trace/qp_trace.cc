// A QP's protocol trace files (qp_trace.h).
#include "emulator/trace/qp_trace.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

namespace softverbs::trace {
namespace {

// A file's first mapping; each later one doubles it, by at most kMaxStep.
constexpr size_t kFirstMapping = 64 * 1024;
constexpr size_t kMaxStep = 64 * 1024 * 1024;
// Written requester lines are dropped from memory past this many.
constexpr size_t kCompactAfter = 1024;

size_t index_of(Stream stream) { return static_cast<size_t>(stream); }

// 24-bit PSNs: `a` comes before `b`.
bool psn_before(uint32_t a, uint32_t b) {
  const uint32_t delta = (b - a) & 0xffffff;
  return delta != 0 && delta < 0x800000;
}

}  // namespace

QpTrace::QpTrace(std::string stem) {
  files_[index_of(Stream::kRequester)].path = stem + ".requester";
  files_[index_of(Stream::kCompleter)].path = stem + ".completer";
  files_[index_of(Stream::kResponder)].path = std::move(stem) + ".responder";
}

QpTrace::~QpTrace() {
  finish();
  for (File& file : files_) {
    if (file.map) ::munmap(file.map, file.mapped);
    if (file.fd >= 0) ::close(file.fd);
  }
}

void QpTrace::event(Stream stream, std::string_view line) {
  std::lock_guard lock(mutex_);
  append_locked(files_[index_of(stream)], line.data(), line.size());
}

void QpTrace::request_event(uint32_t psn, std::string_view line) {
  std::lock_guard lock(mutex_);
  pending_.push_back(PendingRequest{psn, static_cast<uint32_t>(line.size())});
  pending_text_.append(line);
}

void QpTrace::settle_requests_before(uint32_t psn) {
  std::lock_guard lock(mutex_);
  settle_locked([psn](uint32_t pending) { return psn_before(pending, psn); });
}

void QpTrace::abandon_requests_after(uint32_t psn) {
  std::lock_guard lock(mutex_);
  while (pending_.size() > pending_head_ && psn_before(psn, pending_.back().psn)) {
    pending_text_.resize(pending_text_.size() - pending_.back().length);
    pending_.pop_back();
  }
  settle_locked([](uint32_t) { return true; });
}

template <typename Settled>
void QpTrace::settle_locked(Settled settled) {
  File& file = files_[index_of(Stream::kRequester)];
  while (pending_head_ < pending_.size() && settled(pending_[pending_head_].psn)) {
    append_locked(file, pending_text_.data() + pending_text_head_, pending_[pending_head_].length);
    pending_text_head_ += pending_[pending_head_].length;
    ++pending_head_;
  }
  if (pending_head_ == pending_.size()) {
    pending_.clear();
    pending_text_.clear();
    pending_head_ = pending_text_head_ = 0;
  } else if (pending_head_ >= kCompactAfter && 2 * pending_head_ >= pending_.size()) {
    // A stream keeps requests in flight, so the lines never all settle:
    // what was written is let go of now and then.
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(pending_head_));
    pending_text_.erase(0, pending_text_head_);
    pending_head_ = pending_text_head_ = 0;
  }
}

void QpTrace::append_locked(File& file, const char* line, size_t length) {
  if (!make_room_locked(file, length)) return;
  std::memcpy(file.map + file.length, line, length);
  file.length += length;
}

void QpTrace::finish() {
  std::lock_guard lock(mutex_);
  settle_locked([](uint32_t) { return true; });
  for (File& file : files_)
    if (file.fd >= 0 && ::ftruncate(file.fd, static_cast<off_t>(file.length)) == 0) {
      if (file.map) ::munmap(file.map, file.mapped);
      file.map = nullptr;
      file.mapped = 0;  // mapped again from the length on, should events follow
    }
}

bool QpTrace::make_room_locked(File& file, size_t bytes) {
  if (file.length + bytes <= file.mapped) return true;
  if (file.failed) return false;
  if (file.fd < 0) {
    file.fd = ::open(file.path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (file.fd < 0) return fail_locked(file, "cannot write"), false;
  }
  size_t size = std::max(kFirstMapping, file.mapped + std::min(file.mapped, kMaxStep));
  while (size < file.length + bytes) size *= 2;
  if (::ftruncate(file.fd, static_cast<off_t>(size)) != 0)
    return fail_locked(file, "cannot grow"), false;
  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, file.fd, 0);
  if (map == MAP_FAILED) return fail_locked(file, "cannot map"), false;
  if (file.map) ::munmap(file.map, file.mapped);
  file.map = static_cast<char*>(map);
  file.mapped = size;
  return true;
}

void QpTrace::fail_locked(File& file, const char* what) {
  std::fprintf(stderr, "softverbs: %s the trace %s: %s; its QP traces no further\n", what,
               file.path.c_str(), std::strerror(errno));
  file.failed = true;
}

}  // namespace softverbs::trace
