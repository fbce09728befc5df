// Compares two directories of protocol traces (emulator/trace/): whether
// two runs took the same path and, where not, the first event at which
// each QP's requester, completer or responder parted.
//
// Files are named <program>.<pid>.qp<ordinal>.<part>. Processes are paired
// across the runs by program, never by pid: first those whose traces are
// identical, then each remaining one with the process of the other run
// whose traces agree with it longest.
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace softverbs::cli {

struct TracedProcess {
  std::string program;
  std::string pid;
  // "qp<ordinal>.<part>" -> its events, one per line.
  std::map<std::string, std::vector<std::string>> traces;
};

// Every trace file in `directory`, by process. false + `error` when it
// cannot be read or holds no trace.
bool read_trace_directory(const std::string& directory, std::vector<TracedProcess>& out,
                          std::string& error);

struct TraceComparison {
  size_t traces_compared = 0;
  size_t traces_differing = 0;  // a trace on one side only counts too
  bool same() const { return traces_differing == 0; }
};

// Writes what differs (nothing when the runs agree) to `out`.
TraceComparison compare_runs(const std::vector<TracedProcess>& a,
                             const std::vector<TracedProcess>& b, std::FILE* out);

}  // namespace softverbs::cli
