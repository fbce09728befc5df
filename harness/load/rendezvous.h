// What the processes of a load run share before any of them opens a device:
// an anonymous shared mapping made by the parent, holding every process's
// address and QPNs and a barrier. Nothing in it is a verbs object.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace softverbs::load {

inline constexpr uint32_t kMaxProcesses = 128;

struct Endpoint {
  uint16_t lid = 0;
  uint8_t gid[16] = {};
  uint32_t qpn_toward[kMaxProcesses] = {};  // this process's QP for each peer
};

struct Rendezvous {
  std::atomic<uint32_t> arrived{0};
  std::atomic<uint32_t> failed{0};
  Endpoint endpoints[kMaxProcesses];
  // Pairs of processes that come and go: endpoints[i] is filled in once
  // published[i] holds the generation its process was started for.
  std::atomic<uint32_t> published[kMaxProcesses] = {};
  // finished[i] holds the generation of process i once its stream ended
  // intact; its peer may then stop answering (see PairTraffic::linger).
  std::atomic<uint32_t> finished[kMaxProcesses] = {};
  // ended_in_error[i] holds the generation of process i once its stream
  // ended in an error: its peer need not wait for the rest of it.
  std::atomic<uint32_t> ended_in_error[kMaxProcesses] = {};
  // Set by the parent: processes that run until told stop now.
  std::atomic<bool> stop{false};

  // Made before fork(): every child sees the same memory.
  static Rendezvous* create() {
    void* memory = mmap(nullptr, sizeof(Rendezvous), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return memory == MAP_FAILED ? nullptr : new (memory) Rendezvous();
  }

  // Waits until all `processes` have reached barrier number `round`
  // (1, 2, ...), or one failed, or `deadline` passed: false then.
  bool barrier(uint32_t round, uint32_t processes, std::chrono::steady_clock::time_point deadline) {
    arrived.fetch_add(1);
    while (arrived.load() < round * processes) {
      if (failed.load() != 0 || std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return failed.load() == 0;
  }
};

}  // namespace softverbs::load
