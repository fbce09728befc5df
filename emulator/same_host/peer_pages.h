// Peers' shared MR pages (shared_pages.h) mapped into this process, so
// that an RDMA WRITE or READ executed on a peer of the host
// (direct_execution.h) is a memcpy instead of a system call.
//
// A peer's target table names the file by its descriptor in the peer and
// its inode; the descriptor is fetched with pidfd_getfd(2), which the
// kernel allows where it allows process_vm_writev (the same ptrace access
// check), and is used only if it is that inode. A mapping held here keeps
// its file alive, so an inode seen again while it is held is that file.
// Up to kMostMappings are held, the least recently used let go first;
// one that cannot be made is remembered and not tried again. A peer's
// liveness page (liveness_page.h) is mapped the same way, read-only.
//
// A mapping also keeps the pages alive after their owner let go of them
// (its last MR over them deregistered, or the process gone): held, they
// would stay in memory for as long as this process lives. So once a
// second at most (tidy(), from the progress thread) each mapping is
// checked against its owner, through /proc/PID/fd, and let go of when the
// owner no longer holds that file under that descriptor.
//
// Threads: any; one mutex inside, a leaf, not taken when a thread asks
// again for the mapping of each kind it found last. A mapping in use by a
// copy is held and unmapped only when that copy is done.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace softverbs {

// What a peer's file is, as its memfd name says.
// The pages of a file are mapped with the rights the operation needs: an
// RDMA READ only ever through a read-only mapping, so a peer maps MR pages
// writable only once an MR over them granted it a WRITE or an atomic.
enum class PeerFile : uint8_t {
  kMrPages,          // shared MR pages, mapped for reading and writing
  kMrPagesReadOnly,  // the same pages, mapped read-only
  kLiveness,         // its liveness page, mapped read-only
};
inline constexpr size_t kPeerFileKinds = 3;

struct PeerMapping {
  uint32_t pid = 0;
  int32_t fd = -1;  // in the owner
  uint64_t inode = 0;
  PeerFile kind = PeerFile::kMrPages;
  uint8_t* base = nullptr;  // nullptr: it could not be mapped
  uint64_t size = 0;
  uint64_t last_used = 0;
  ~PeerMapping();
};

class PeerPages {
 public:
  static constexpr size_t kMostMappings = 64;

  // The process's one instance; a child of fork() starts with none.
  static PeerPages& process();

  // The file `fd` of process `pid`, if it is inode `inode` and a file of
  // that kind, mapped here; nullptr when it cannot be.
  std::shared_ptr<const PeerMapping> find(uint32_t pid, int32_t fd, uint64_t inode,
                                          PeerFile kind = PeerFile::kMrPages);

  // Lets go of the mappings whose owner no longer holds their file (above),
  // at most once per kTidyIntervalNs and never waiting for the mutex; one
  // load where none is held. Does not make the instance.
  static void tidy();
  static constexpr uint64_t kTidyIntervalNs = 1'000'000'000;
  // The same at once. Returns how many were let go of.
  size_t let_go_of_released();
  // How many mappings are held (remembered failures included).
  size_t held();

 private:
  // After fork(), in the child, which has none of the mappings.
  void forget_all();
  void tidy_now_and_then();
  size_t let_go_of_released_locked();

  static std::atomic<PeerPages*> created;

  std::shared_ptr<const PeerMapping> find_locked(uint32_t pid, int32_t fd, uint64_t inode,
                                                 PeerFile kind);
  std::shared_ptr<PeerMapping> map(uint32_t pid, int32_t fd, uint64_t inode, PeerFile kind);

  std::mutex mutex_;
  std::vector<std::shared_ptr<PeerMapping>> mappings_;
  uint64_t uses_ = 0;
  std::atomic<uint64_t> next_tidy_ns_{0};
  std::atomic<bool> any_held_{false};
};

}  // namespace softverbs
