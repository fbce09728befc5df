// `capture start` and `capture stop` on a process's control socket: a packet
// capture begun after the process started (`softverbs capture --pid`).
//
//   capture start [qp=N[,N...]] [device=NAME] [limit-mb=N] FILE
//   capture stop
//
// FILE is an absolute path, the rest of the line. One capture at a time;
// a process started under `softverbs capture -- PROGRAM` already has one,
// which lasts as long as the process.
#pragma once

#include <string>
#include <string_view>

namespace softverbs {
class Engine;
namespace control {

// The reply line; "error: ..." when the request cannot be done.
std::string capture_request(Engine& engine, std::string_view args);

}  // namespace control
}  // namespace softverbs
