// How a forked peer's run ended: passed, or failed with a reason.
#pragma once

#include <string>
#include <utility>

namespace softverbs::testsupport {

struct PeerOutcome {
  bool passed = false;
  std::string message;

  static PeerOutcome pass() { return {true, {}}; }
  static PeerOutcome fail(std::string why) { return {false, std::move(why)}; }
};

}  // namespace softverbs::testsupport
