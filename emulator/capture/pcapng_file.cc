// Block layouts from the pcapng specification (draft-ietf-opsawg-pcapng):
// every block is type, total length, body padded to 32 bits, total length
// again; written in this machine's byte order, which the section header's
// byte-order magic announces.
#include "emulator/capture/pcapng_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace softverbs::capture {
namespace {

constexpr uint32_t kSectionHeaderBlock = 0x0a0d0d0a;
constexpr uint32_t kInterfaceDescriptionBlock = 1;
constexpr uint32_t kEnhancedPacketBlock = 6;
constexpr uint32_t kByteOrderMagic = 0x1a2b3c4d;
constexpr uint16_t kLinkTypeEthernet = 1;
constexpr uint16_t kOptionEnd = 0;
constexpr uint16_t kOptionComment = 1;
constexpr uint16_t kOptionInterfaceName = 2;
constexpr uint16_t kOptionTimestampResolution = 9;
constexpr uint16_t kOptionPacketFlags = 2;  // epb_flags: bits 0-1 the direction
constexpr uint32_t kInbound = 1;
constexpr uint32_t kOutbound = 2;
constexpr uint8_t kNanoseconds = 9;  // 10^-9
constexpr uint32_t kSnapLength = 0;  // no limit

struct Block {
  std::vector<uint8_t> body;

  void u8(uint8_t v) { body.push_back(v); }
  void u16(uint16_t v) { append(&v, sizeof v); }
  void u32(uint32_t v) { append(&v, sizeof v); }
  void u64(uint64_t v) { append(&v, sizeof v); }
  void append(const void* p, size_t n) {
    const auto* bytes = static_cast<const uint8_t*>(p);
    body.insert(body.end(), bytes, bytes + n);
  }
  void pad() {
    while (body.size() % 4) body.push_back(0);
  }
  void option(uint16_t code, std::span<const uint8_t> value) {
    u16(code);
    u16(static_cast<uint16_t>(value.size()));
    append(value.data(), value.size());
    pad();
  }
  void end_options() {
    u16(kOptionEnd);
    u16(0);
  }
  // Type, length, body, length.
  std::vector<uint8_t> framed(uint32_t type) const {
    Block out;
    const uint32_t total = static_cast<uint32_t>(12 + body.size());
    out.u32(type);
    out.u32(total);
    out.append(body.data(), body.size());
    out.u32(total);
    return std::move(out.body);
  }
};

std::span<const uint8_t> bytes_of(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

std::vector<uint8_t> section_header() {
  Block b;
  b.u32(kByteOrderMagic);
  b.u16(1);  // major version
  b.u16(0);  // minor version
  b.u64(UINT64_MAX);  // section length: not given
  b.option(3, bytes_of("softverbs"));  // shb_userappl
  b.end_options();
  return b.framed(kSectionHeaderBlock);
}

std::vector<uint8_t> interface_description(uint16_t link_type, std::string_view name) {
  Block b;
  b.u16(link_type);
  b.u16(0);  // reserved
  b.u32(kSnapLength);
  b.option(kOptionInterfaceName, bytes_of(name));
  const uint8_t resolution = kNanoseconds;
  b.option(kOptionTimestampResolution, std::span(&resolution, 1));
  b.end_options();
  return b.framed(kInterfaceDescriptionBlock);
}

}  // namespace

std::unique_ptr<PcapngFile> PcapngFile::create(const std::string& path, uint64_t limit_bytes,
                                               Errno& err) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  std::FILE* file = fd >= 0 ? fdopen(fd, "wb") : nullptr;
  if (!file) {
    err = errno;
    if (fd >= 0) ::close(fd);
    return nullptr;
  }
  std::unique_ptr<PcapngFile> out(new PcapngFile(file, limit_bytes));
  for (const std::vector<uint8_t>& block :
       {section_header(), interface_description(kLinkTypeEthernet, "softverbs")}) {
    std::fwrite(block.data(), 1, block.size(), file);
    out->bytes_ += block.size();
  }
  std::fflush(file);
  err = 0;
  return out;
}

PcapngFile::~PcapngFile() { close(); }

void PcapngFile::close() {
  std::lock_guard lock(mutex_);
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

bool PcapngFile::write(uint64_t timestamp_ns, bool outbound,
                       std::span<const uint8_t> packet, std::string_view comment) {
  Block b;
  b.u32(0);  // the interface
  b.u32(static_cast<uint32_t>(timestamp_ns >> 32));
  b.u32(static_cast<uint32_t>(timestamp_ns));
  b.u32(static_cast<uint32_t>(packet.size()));  // captured
  b.u32(static_cast<uint32_t>(packet.size()));  // on the wire
  b.append(packet.data(), packet.size());
  b.pad();
  if (!comment.empty()) b.option(kOptionComment, bytes_of(comment));
  const uint32_t flags = outbound ? kOutbound : kInbound;
  b.option(kOptionPacketFlags, std::span(reinterpret_cast<const uint8_t*>(&flags), sizeof flags));
  b.end_options();
  const std::vector<uint8_t> block = b.framed(kEnhancedPacketBlock);
  std::lock_guard lock(mutex_);
  if (!file_) return false;
  if (bytes_ + block.size() > limit_bytes_) {
    ++over_limit_;
    return false;
  }
  // Flushed per packet: a program that is killed leaves a readable file.
  std::fwrite(block.data(), 1, block.size(), file_);
  std::fflush(file_);
  bytes_ += block.size();
  ++written_;
  return true;
}

uint64_t PcapngFile::packets_written() const {
  std::lock_guard lock(mutex_);
  return written_;
}

uint64_t PcapngFile::packets_over_limit() const {
  std::lock_guard lock(mutex_);
  return over_limit_;
}

}  // namespace softverbs::capture
