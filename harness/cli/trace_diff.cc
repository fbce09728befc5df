// Two runs' protocol traces compared (trace_diff.h).
#include "harness/cli/trace_diff.h"

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>

namespace softverbs::cli {
namespace {

// <program>.<pid>.qp<ordinal>.<part>, read from the right: a program's
// name may hold dots.
bool parse_trace_name(const std::string& name, std::string& program, std::string& pid,
                      std::string& key) {
  const size_t part_dot = name.rfind('.');
  if (part_dot == std::string::npos || part_dot == 0) return false;
  const size_t qp_dot = name.rfind('.', part_dot - 1);
  if (qp_dot == std::string::npos || qp_dot == 0 || name.compare(qp_dot + 1, 2, "qp") != 0)
    return false;
  const size_t pid_dot = name.rfind('.', qp_dot - 1);
  if (pid_dot == std::string::npos || pid_dot == 0) return false;
  pid = name.substr(pid_dot + 1, qp_dot - pid_dot - 1);
  if (pid.empty() || !std::all_of(pid.begin(), pid.end(), ::isdigit)) return false;
  const std::string part = name.substr(part_dot + 1);
  if (part != "requester" && part != "completer" && part != "responder") return false;
  program = name.substr(0, pid_dot);
  key = name.substr(qp_dot + 1);
  return true;
}

size_t common_prefix(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  const auto [at_a, at_b] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return static_cast<size_t>(at_a - a.begin());
}

// How far two processes' traces agree: the events they share from the start.
size_t agreement(const TracedProcess& a, const TracedProcess& b) {
  size_t shared = 0;
  for (const auto& [key, events] : a.traces)
    if (auto it = b.traces.find(key); it != b.traces.end()) shared += common_prefix(events, it->second);
  return shared;
}

const std::vector<std::string> kNoEvents;

const std::vector<std::string>& events_of(const TracedProcess& p, const std::string& key) {
  auto it = p.traces.find(key);
  return it == p.traces.end() ? kNoEvents : it->second;
}

// Says where one trace of a pair parts, if it does; true when it does.
bool report_trace(const TracedProcess& a, const TracedProcess& b, const std::string& key,
                  std::FILE* out) {
  const bool in_a = a.traces.count(key) != 0;
  const bool in_b = b.traces.count(key) != 0;
  const std::vector<std::string>& ea = events_of(a, key);
  const std::vector<std::string>& eb = events_of(b, key);
  if (in_a && in_b && ea == eb) return false;
  std::fprintf(out, "%s (pid %s in A, %s in B), %s: ", a.program.c_str(), a.pid.c_str(),
               b.pid.c_str(), key.c_str());
  if (!in_a || !in_b) {
    std::fprintf(out, "only in %s\n", in_a ? "A" : "B");
    return true;
  }
  const size_t at = common_prefix(ea, eb);
  std::fprintf(out, "the runs part at event %zu\n", at + 1);
  if (at > 0) std::fprintf(out, "  both: %s\n", ea[at - 1].c_str());
  std::fprintf(out, "  A:    %s\n", at < ea.size() ? ea[at].c_str() : "(ends here)");
  std::fprintf(out, "  B:    %s\n", at < eb.size() ? eb[at].c_str() : "(ends here)");
  return true;
}

// A trace file's events. A killed process's file ends in zero bytes,
// perhaps after half a line: read up to the last whole line before them.
std::vector<std::string> read_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (const size_t zero = text.find('\0'); zero != std::string::npos) {
    const size_t last_newline = text.rfind('\n', zero);
    text.resize(last_newline == std::string::npos ? 0 : last_newline + 1);
  }
  std::vector<std::string> events;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    events.push_back(text.substr(at, end - at));
    at = end == std::string::npos ? text.size() : end + 1;
  }
  return events;
}

// Which process of B each process of A is compared with (indices): the
// identical ones first, then each of the rest with the one of the same
// program whose traces agree with it longest. Unpaired ones are false in
// `a_paired`/`b_paired`.
std::vector<std::pair<size_t, size_t>> pair_processes(const std::vector<TracedProcess>& a,
                                                      const std::vector<TracedProcess>& b,
                                                      std::vector<bool>& a_paired,
                                                      std::vector<bool>& b_paired) {
  a_paired.assign(a.size(), false);
  b_paired.assign(b.size(), false);
  std::vector<std::pair<size_t, size_t>> pairs;
  auto pair = [&](size_t i, size_t j) {
    a_paired[i] = b_paired[j] = true;
    pairs.emplace_back(i, j);
  };
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < b.size() && !a_paired[i]; ++j)
      if (!b_paired[j] && a[i].program == b[j].program && a[i].traces == b[j].traces) pair(i, j);
  for (size_t i = 0; i < a.size(); ++i) {
    if (a_paired[i]) continue;
    std::optional<size_t> best;
    size_t best_agreement = 0;
    for (size_t j = 0; j < b.size(); ++j) {
      if (b_paired[j] || a[i].program != b[j].program) continue;
      if (const size_t shared = agreement(a[i], b[j]); !best || shared > best_agreement) {
        best = j;
        best_agreement = shared;
      }
    }
    if (best) pair(i, *best);
  }
  return pairs;
}

}  // namespace

bool read_trace_directory(const std::string& directory, std::vector<TracedProcess>& out,
                          std::string& error) {
  DIR* dir = ::opendir(directory.c_str());
  if (!dir) {
    error = "cannot read the trace directory " + directory;
    return false;
  }
  std::map<std::pair<std::string, std::string>, TracedProcess> processes;
  while (const dirent* entry = ::readdir(dir)) {
    std::string program, pid, key;
    if (!parse_trace_name(entry->d_name, program, pid, key)) continue;
    TracedProcess& process = processes[{program, pid}];
    process.program = program;
    process.pid = pid;
    process.traces[key] = read_events(directory + "/" + entry->d_name);
  }
  ::closedir(dir);
  if (processes.empty()) {
    error = directory + " holds no protocol trace (files <program>.<pid>.qp<N>.<part>, written "
                        "by softverbs run --trace DIR or SOFTVERBS_TRACE=DIR)";
    return false;
  }
  out.clear();
  for (auto& [name, process] : processes) out.push_back(std::move(process));
  return true;
}

TraceComparison compare_runs(const std::vector<TracedProcess>& a,
                             const std::vector<TracedProcess>& b, std::FILE* out) {
  TraceComparison result;
  std::vector<bool> a_paired, b_paired;
  for (const auto& [i, j] : pair_processes(a, b, a_paired, b_paired)) {
    std::set<std::string> keys;
    for (const auto& [key, events] : a[i].traces) keys.insert(key);
    for (const auto& [key, events] : b[j].traces) keys.insert(key);
    for (const std::string& key : keys) {
      ++result.traces_compared;
      if (report_trace(a[i], b[j], key, out)) ++result.traces_differing;
    }
  }
  auto report_unpaired = [&](const std::vector<TracedProcess>& side,
                             const std::vector<bool>& paired, const char* name) {
    for (size_t i = 0; i < side.size(); ++i) {
      if (paired[i]) continue;
      std::fprintf(out, "%s (pid %s): only in %s, %zu traces\n", side[i].program.c_str(),
                   side[i].pid.c_str(), name, side[i].traces.size());
      result.traces_compared += side[i].traces.size();
      result.traces_differing += side[i].traces.size();
    }
  };
  report_unpaired(a, a_paired, "A");
  report_unpaired(b, b_paired, "B");
  return result;
}

}  // namespace softverbs::cli
