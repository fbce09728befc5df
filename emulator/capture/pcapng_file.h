// A pcapng file (the format Wireshark and tshark read) with one Ethernet
// interface. Each packet has its direction and may carry a comment (a
// fault that changed it). Writing stops at a size limit; what is not
// written is counted.
//
// Threads: any; one lock around each packet.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "emulator/types.h"

namespace softverbs::capture {

class PcapngFile {
 public:
  // Creates `path`, which must not exist yet, and writes the section and
  // interface headers. nullptr + err on failure (EEXIST: it exists).
  static std::unique_ptr<PcapngFile> create(const std::string& path, uint64_t limit_bytes,
                                            Errno& err);
  ~PcapngFile();
  PcapngFile(const PcapngFile&) = delete;
  PcapngFile& operator=(const PcapngFile&) = delete;

  // Appends one packet (timestamp: ns since the epoch). False when the
  // size limit is reached (the packet is counted as not written).
  bool write(uint64_t timestamp_ns, bool outbound,
             std::span<const uint8_t> packet, std::string_view comment = {});

  // Writes nothing more; later write()s return false uncounted. The file
  // stays readable as it is.
  void close();

  uint64_t packets_written() const;
  uint64_t packets_over_limit() const;

 private:
  PcapngFile(std::FILE* file, uint64_t limit_bytes) : file_(file), limit_bytes_(limit_bytes) {}

  mutable std::mutex mutex_;
  std::FILE* file_;  // nullptr once closed
  uint64_t limit_bytes_;
  uint64_t bytes_ = 0;
  uint64_t written_ = 0;
  uint64_t over_limit_ = 0;
};

}  // namespace softverbs::capture
