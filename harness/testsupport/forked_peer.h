// Runs one side of a test in a forked child process (its own address space,
// its own verbs context) and the other side in the calling process.
//
// Fork comes first: neither body may use a verbs context opened before the
// fork (a context must not cross fork()), so each opens its own device.
//
// The child reports through its PeerOutcome, which travels back over the
// channel; the parent asserts on it. The child is killed (SIGKILL) once the
// deadline passes, and also dies with the parent, so a hang fails the test
// rather than the test run.
#pragma once

#include <chrono>
#include <functional>

#include "harness/testsupport/peer_channel.h"
#include "harness/testsupport/peer_outcome.h"

namespace softverbs::testsupport {

inline constexpr std::chrono::seconds kDefaultPeerDeadline{90};

using ChildBody = std::function<PeerOutcome(PeerChannel&)>;
using ParentBody = std::function<void(PeerChannel&)>;

// Forks, runs `child` there and `parent` here, and returns the child's
// outcome: what it reported, or why it reported nothing (crash, exit,
// deadline).
PeerOutcome run_with_forked_peer(const ChildBody& child, const ParentBody& parent,
                                 std::chrono::seconds deadline = kDefaultPeerDeadline);

}  // namespace softverbs::testsupport
