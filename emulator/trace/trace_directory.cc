// Where a process's protocol traces go (trace_directory.h).
#include "emulator/trace/trace_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace softverbs::trace {
namespace {

// mkdir -p: each missing component in turn.
bool make_directories(const std::string& path, std::string& error) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    const std::string prefix = path.substr(0, at);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      error = "cannot make the trace directory " + prefix + ": " + std::strerror(errno) +
              " (SOFTVERBS_TRACE names where traces go)";
      return false;
    }
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    error = "SOFTVERBS_TRACE=" + path + " is not a directory";
    return false;
  }
  return true;
}

std::string program_name() {
  std::ifstream in("/proc/self/comm");
  std::string name;
  std::getline(in, name);
  std::replace(name.begin(), name.end(), '/', '_');
  return name.empty() ? "program" : name;
}

}  // namespace

std::shared_ptr<TraceDirectory> TraceDirectory::from_environment(std::string& error) {
  const char* directory = std::getenv("SOFTVERBS_TRACE");
  if (!directory || !*directory) return nullptr;
  if (!make_directories(directory, error)) return nullptr;
  return std::make_shared<TraceDirectory>(directory, program_name(), ::getpid());
}

TraceDirectory::TraceDirectory(std::string directory, std::string program, long pid)
    : stem_(std::move(directory) + "/" + std::move(program) + "." + std::to_string(pid)) {}

std::shared_ptr<QpTrace> TraceDirectory::open(uint32_t ordinal) {
  auto trace = std::make_shared<QpTrace>(stem_ + ".qp" + std::to_string(ordinal));
  std::lock_guard lock(mutex_);
  // The QPs gone are forgotten when the list has doubled since: each QP
  // created costs a constant share, not a pass over every one (a program
  // may hold tens of thousands).
  if (open_.size() >= 2 * kept_after_pruning_) {
    std::erase_if(open_, [](const std::weak_ptr<QpTrace>& t) { return t.expired(); });
    kept_after_pruning_ = std::max<size_t>(open_.size(), 16);
  }
  open_.push_back(trace);
  return trace;
}

void TraceDirectory::finish_all() {
  std::vector<std::shared_ptr<QpTrace>> live;
  {
    std::lock_guard lock(mutex_);
    for (const auto& weak : open_)
      if (auto trace = weak.lock()) live.push_back(std::move(trace));
  }
  for (const auto& trace : live) trace->finish();
}

}  // namespace softverbs::trace
