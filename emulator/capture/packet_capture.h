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
#include <string_view>
#include <vector>

#include "emulator/capture/pcapng_file.h"
#include "emulator/fault/frame_observer.h"

namespace softverbs::capture {

struct CaptureFilter {
  std::vector<uint32_t> qpns;  // empty: every QP
  int device_index = -1;       // -1: every device
};

struct CaptureSettings {
  std::string path;  // taken already: FILE-<pid> beside it
  CaptureFilter filter;
  uint64_t limit_mib = 256;
};

// The settings' parts from text, as the environment or a control request
// gives them. False when the text is no such thing.
bool parse_qp_list(std::string_view text, std::vector<uint32_t>& qpns);  // "2,0x12"
bool find_device_index(std::string_view name, int& index);
bool parse_limit_mib(std::string_view text, uint64_t& mib);

class PacketCapture final : public fault::FrameObserver {
 public:
  // nullptr + error when the file cannot be made.
  static std::unique_ptr<PacketCapture> open(const CaptureSettings& settings, std::string& error);
  // From the environment: nullptr with `error` empty when no capture is
  // asked for; nullptr with `error` set when the settings are wrong or the
  // file cannot be made.
  static std::unique_ptr<PacketCapture> from_environment(std::string& error);

  PacketCapture(std::string path, std::unique_ptr<PcapngFile> file, CaptureFilter filter)
      : path_(std::move(path)), file_(std::move(file)), filter_(std::move(filter)) {}

  void observe(fault::Direction direction, std::span<const uint8_t> frame,
               fault::FrameFate fate) override;

  // Writes nothing more and closes the file; observe() may still be called.
  void stop() { file_->close(); }

  const std::string& path() const { return path_; }
  const PcapngFile& file() const { return *file_; }

 private:
  bool wanted(std::span<const uint8_t> frame) const;

  const std::string path_;
  std::unique_ptr<PcapngFile> file_;
  const CaptureFilter filter_;
};

// The packet a frame becomes on a network (Ethernet + IP + UDP + RoCEv2
// payload), into `out`; false when it is no IB frame.
bool network_packet_of(std::span<const uint8_t> frame, std::vector<uint8_t>& out);

}  // namespace softverbs::capture
