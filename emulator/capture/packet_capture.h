// `softverbs capture`: every frame a process's soft devices send and
// receive, on every wire, written to a pcapng file as RoCEv2 packets:
// Ethernet + IPv4/IPv6 + UDP 4791 + BTH ... + ICRC, the ICRC recomputed over
// those headers (a frame damaged by an injected fault keeps a bad one).
// A RoCE frame's GIDs are its IP addresses. A frame of the InfiniBand
// personality has no IP addresses: it is shown between its ports' GIDs
// (fe80::GUID) as IPv6, and its LRH (LIDs, SL, VL) is not shown.
// What a fault did is the packet's comment; a frame a fault held back is
// written when it goes on.
//
// Configured by the environment, which `softverbs capture` sets:
//   SOFTVERBS_CAPTURE=FILE          the pcapng file, made by the program's
//                                   first process; any other process (a
//                                   child) writes FILE with -<pid> before
//                                   its extension
//   SOFTVERBS_CAPTURE_QP=N[,N...]   only packets to these QPNs (DestQP)
//   SOFTVERBS_CAPTURE_DEVICE=NAME   only packets from or to this device
//   SOFTVERBS_CAPTURE_LIMIT_MB=N    stop writing past N MiB (default 256)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "emulator/capture/pcapng_file.h"
#include "emulator/fault/frame_observer.h"

namespace softverbs::capture {

struct CaptureFilter {
  std::vector<uint32_t> qpns;  // empty: every QP
  int device_index = -1;       // -1: every device
};

class PacketCapture final : public fault::FrameObserver {
 public:
  // From the environment: nullptr with `error` empty when no capture is
  // asked for; nullptr with `error` set when the settings are wrong or the
  // file cannot be made.
  static std::unique_ptr<PacketCapture> from_environment(std::string& error);

  PacketCapture(std::unique_ptr<PcapngFile> file, CaptureFilter filter)
      : file_(std::move(file)), filter_(std::move(filter)) {}

  void observe(fault::Direction direction, std::span<const uint8_t> frame,
               fault::FrameFate fate) override;

  const PcapngFile& file() const { return *file_; }

 private:
  bool wanted(std::span<const uint8_t> frame) const;

  std::unique_ptr<PcapngFile> file_;
  CaptureFilter filter_;
};

// The packet a frame becomes on a network (Ethernet + IP + UDP + RoCEv2
// payload), into `out`; false when it is no IB frame.
bool network_packet_of(std::span<const uint8_t> frame, std::vector<uint8_t>& out);

}  // namespace softverbs::capture
