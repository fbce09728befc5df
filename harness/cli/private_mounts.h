// A mount namespace of this process's own, so that it can mount without
// changing what any other process sees.
#pragma once

#include <string>

namespace softverbs::cli {

// Moves this (single-threaded) process into a new mount namespace whose
// mounts do not propagate back to the original. With CAP_SYS_ADMIN a plain
// mount namespace; otherwise, when `allow_user_namespace`, inside a new user
// namespace that maps this user's uid and gid to themselves, so files keep
// their owner and processes outside, of the same user, stay its peers.
// The price of the user namespace: the kernel lets no process of another
// user namespace (a program started by another `softverbs run`) attach to
// this one's memory (process_vm_readv), so long messages between them go
// as packets instead of one copy.
struct MountNamespaceOutcome {
  bool entered = false;  // mounts from now on are private to this process
  // The process was moved into a user namespace but its ids could not be
  // mapped: it must not run a program (it would have no uid).
  bool broken = false;
  std::string problem;  // why not entered
};

MountNamespaceOutcome enter_private_mount_namespace(bool allow_user_namespace);

}  // namespace softverbs::cli
