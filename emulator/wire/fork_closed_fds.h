// Descriptors a forked child must not keep: sockets the kernel hands a
// share of the host's traffic to (the UDP wire's, in a SO_REUSEPORT group).
// A child inherits them but does not serve them, and once the parent closes
// its copies the child's would keep them in the group, swallowing datagrams
// until the child exits. The child closes them as it starts (pthread_atfork).
//
// Thread-safe and lock-free, so that the child's handler cannot find a lock
// held by a thread that did not survive the fork.
#pragma once

namespace softverbs {

// From now on, a child forked by this process closes `fd` at once. Up to
// 256 descriptors at a time; past that, children keep the rest.
void close_in_forked_child(int fd);
// Call before closing `fd` here.
void keep_in_forked_child(int fd);

}  // namespace softverbs
