// A hostile host on the UDP wire: sends crafted datagrams to a host's RoCEv2
// port, as any program on the network could, and says how many of each kind
// it sent. Used by udp_hosts_test.sh while real programs run on the target:
// they must finish intact, and the target must count what it dropped.
//
//   udp_hostile --target 198.18.0.2 --source 198.18.0.3 [--rounds N] [--qps N]
//
// Each round sends, to QPNs 2..qps+1: RC SENDs and RDMA WRITEs with a right
// ICRC but random PSNs (stale or out of sequence), WRITEs with random R_Keys,
// addresses and lengths, UD SENDs with random Q_Keys, READ requests past any
// MR; then truncated and unaligned datagrams, wrong ICRCs, empty datagrams,
// garbage to QP1 and to the multicast QPN.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "emulator/packet/codec.h"
#include "emulator/packet/roce_v2.h"

namespace {

namespace packet = softverbs::packet;
using softverbs::Gid;

constexpr uint16_t kSourcePort = 49152;

struct Options {
  std::string target;
  std::string source;
  int rounds = 200;
  uint32_t qps = 16;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--target") o.target = argv[i + 1];
    else if (flag == "--source") o.source = argv[i + 1];
    else if (flag == "--rounds") o.rounds = std::atoi(argv[i + 1]);
    else if (flag == "--qps") o.qps = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    else return false;
  }
  return !o.target.empty() && !o.source.empty() && o.rounds > 0 && o.qps > 0;
}

Gid ipv4_gid(const std::string& text) {
  Gid gid{};
  gid[10] = gid[11] = 0xff;
  inet_pton(AF_INET, text.c_str(), gid.data() + 12);
  return gid;
}

class Hostile {
 public:
  Hostile(const Options& o) : options_(o), source_(ipv4_gid(o.source)), target_(ipv4_gid(o.target)) {
    // The ICRC covers the UDP source port: send from the one it names.
    fd_ = socket(AF_INET, SOCK_DGRAM, 0);
    const int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    from.sin_port = htons(kSourcePort);
    inet_pton(AF_INET, o.source.c_str(), &from.sin_addr);
    if (bind(fd_, reinterpret_cast<const sockaddr*>(&from), sizeof from) != 0)
      std::perror("udp_hostile: bind");
    to_.sin_family = AF_INET;
    to_.sin_port = htons(packet::kRoceV2UdpPort);
    inet_pton(AF_INET, o.target.c_str(), &to_.sin_addr);
  }
  ~Hostile() { close(fd_); }

  void round() {
    for (uint32_t qpn = 2; qpn < 2 + options_.qps; ++qpn) {
      crafted(qpn, packet::Opcode::kRcSendOnly, 64);
      crafted(qpn, packet::Opcode::kRcWriteOnly, 128);
      crafted(qpn, packet::Opcode::kRcReadRequest, 0);
      crafted(qpn, packet::Opcode::kUdSendOnly, 32);
    }
    const std::vector<uint8_t> good = datagram(2, packet::Opcode::kRcSendOnly, 64);
    send("truncated", std::vector<uint8_t>(good.begin(), good.begin() + 9));
    send("unaligned", std::vector<uint8_t>(good.begin(), good.end() - 1));
    std::vector<uint8_t> bad = good;
    bad[20] ^= 0x40;
    send("bad ICRC", bad);
    send("empty", {});
    std::vector<uint8_t> noise(256);
    for (uint8_t& b : noise) b = static_cast<uint8_t>(random_());
    send("noise", noise);
    crafted(1, packet::Opcode::kUdSendOnly, 256);             // garbage MAD to QP1
    crafted(0xffffff, packet::Opcode::kUdSendOnly, 64);       // to the multicast QPN
  }

  void report() const {
    for (const auto& [kind, count] : sent_) std::printf("sent %s: %llu\n", kind.c_str(),
                                                        static_cast<unsigned long long>(count));
  }

 private:
  // A well-formed RoCEv2 datagram (right ICRC) with random fields where a
  // real peer would have the QP's own.
  std::vector<uint8_t> datagram(uint32_t qpn, packet::Opcode opcode, size_t payload_bytes) {
    packet::Headers h;
    h.has_grh = true;
    h.grh.sgid = source_;
    h.grh.dgid = target_;
    h.bth.opcode = opcode;
    h.bth.dest_qp = qpn;
    h.bth.psn = random_() & 0xffffff;
    h.bth.ack_req = true;
    h.reth = {random_() | uint64_t{random_()} << 32, static_cast<uint32_t>(random_()),
              static_cast<uint32_t>(random_() % 65536)};
    h.deth = {static_cast<uint32_t>(random_()), 0x123456};
    std::vector<uint8_t> payload(payload_bytes);
    if (opcode == packet::Opcode::kRcWriteOnly) h.reth.dma_len = static_cast<uint32_t>(payload_bytes);
    for (uint8_t& b : payload) b = static_cast<uint8_t>(random_());
    std::vector<uint8_t> frame(packet::kMaxFrameBytes);
    frame.resize(packet::encode_ib(h, payload, frame));
    packet::RoceV2Addressing a;
    a.source_port = kSourcePort;
    std::vector<uint8_t> out(frame.size() + packet::kRoceV2MaxHeaderBytes);
    const auto p = packet::ib_to_roce_v2(frame, a, out);
    return {p.begin(), p.end()};
  }

  void crafted(uint32_t qpn, packet::Opcode opcode, size_t payload_bytes) {
    send(packet::opcode_info(static_cast<uint8_t>(opcode)).name, datagram(qpn, opcode, payload_bytes));
  }

  void send(const std::string& kind, const std::vector<uint8_t>& bytes) {
    if (sendto(fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<const sockaddr*>(&to_),
               sizeof to_) >= 0)
      ++sent_[kind];
    // Paced a little: a flood that only fills the target's socket buffer
    // tests the kernel, not softverbs.
    if (++since_pause_ % 64 == 0) usleep(200);
  }

  Options options_;
  Gid source_, target_;
  int fd_ = -1;
  sockaddr_in to_{};
  std::mt19937 random_{12345};
  std::map<std::string, uint64_t> sent_;
  uint64_t since_pause_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, options)) {
    std::fprintf(stderr,
                 "usage: udp_hostile --target IPV4 --source IPV4 [--rounds N] [--qps N]\n");
    return 2;
  }
  Hostile hostile(options);
  for (int r = 0; r < options.rounds; ++r) hostile.round();
  hostile.report();
  return 0;
}
