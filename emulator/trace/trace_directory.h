// Where a process writes its QPs' protocol traces (qp_trace.h):
// SOFTVERBS_TRACE=DIR, or `softverbs run --trace DIR`. Each QP's files are
// named <program>.<pid>.qp<ordinal>.{requester,completer,responder}: the program's
// name and the QP's creation ordinal name it alike in every run, the pid
// keeps two processes of one program apart (`softverbs trace diff` pairs
// files without it).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "emulator/trace/qp_trace.h"

namespace softverbs::trace {

class TraceDirectory {
 public:
  // From SOFTVERBS_TRACE: null when unset. The directory is made if
  // missing; `error` says why when it cannot be (then null too).
  static std::shared_ptr<TraceDirectory> from_environment(std::string& error);
  TraceDirectory(std::string directory, std::string program, long pid);

  // The trace of the QP this process created `ordinal`-th.
  std::shared_ptr<QpTrace> open(uint32_t ordinal);
  // Cuts every open QP's files to their events (at exit).
  void finish_all();

 private:
  std::string stem_;  // DIR/<program>.<pid>
  std::mutex mutex_;
  std::vector<std::weak_ptr<QpTrace>> open_;
  size_t kept_after_pruning_ = 16;
};

}  // namespace softverbs::trace
