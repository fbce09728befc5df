// A third opinion on the layouts: the CM messages go into a pcap as RoCEv2
// datagrams to QP1 and Wireshark's InfiniBand dissector (tshark) says what
// it reads in them. Skipped where tshark is not installed.
//
// Wireshark 4.0 dissects REQ, REP, REJ, RTU, DREQ and DREP field by field;
// MRA and the SIDR messages only by name. It reads the REQ's flow labels
// and packet rates from the wrong bytes (3- and 1-byte items under masks
// meant for the whole 32-bit word at byte 88 / 132), so those are not
// compared here; cm_wire_layout_test.cc checks them by hand against the
// IBTA table, as it does the ECE vendor IDs Wireshark shows as reserved.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "emulator/cm/cm_codec.h"
#include "emulator/cm/cm_test_messages.h"
#include "emulator/cm/cma_ip_header.h"
#include "emulator/cm/roce_pcap_test_support.h"

namespace softverbs::cm {
namespace {

using Value = std::variant<uint64_t, std::string>;  // a number or tshark's text
using Expected = std::vector<std::pair<std::string, Value>>;
using FrameFields = std::map<std::string, std::string>;

constexpr uint64_t kTid = 0x1122334455667788;

bool have_tshark() { return std::system("command -v tshark >/dev/null 2>&1") == 0; }

template <size_t N>
std::string hex(const std::array<uint8_t, N>& bytes, size_t from = 0) {
  std::string text;
  char digits[3];
  for (size_t i = from; i < N; ++i) {
    std::snprintf(digits, sizeof digits, "%02x", bytes[i]);
    text += digits;
  }
  return text;
}

// Runs tshark once over the capture and returns each frame's fields.
std::vector<FrameFields> tshark_fields(const std::string& pcap,
                                       const std::vector<std::string>& fields) {
  std::string command = "tshark -r '" + pcap + "' -T fields -E occurrence=f";
  for (const std::string& field : fields) command += " -e " + field;
  FILE* pipe = popen((command + " 2>/dev/null").c_str(), "r");
  std::vector<FrameFields> frames;
  if (!pipe) return frames;
  std::string output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  pclose(pipe);
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    FrameFields frame;
    std::istringstream columns(line);
    std::string column;
    for (size_t i = 0; i < fields.size() && std::getline(columns, column, '\t'); ++i) {
      frame[fields[i]] = column;
    }
    frames.push_back(frame);
  }
  return frames;
}

void expect_fields(const FrameFields& frame, const Expected& expected, int number) {
  for (const auto& [field, value] : expected) {
    const std::string actual = frame.count(field) ? frame.at(field) : "";
    if (const auto* text = std::get_if<std::string>(&value)) {
      EXPECT_EQ(actual, *text) << "frame " << number << " " << field;
    } else {
      ASSERT_FALSE(actual.empty()) << "frame " << number << " " << field << " absent";
      EXPECT_EQ(std::strtoull(actual.c_str(), nullptr, 0), std::get<uint64_t>(value))
          << "frame " << number << " " << field << " = " << actual;
    }
  }
}

ReqMessage req_with_ip_header() {
  ReqMessage req = testing::sample_req();
  const CmaIpHeader ip{.ip_version = 4, .source_port = 50000,
                       .source = cma_ipv4_address(testing::kSourceIp),
                       .destination = cma_ipv4_address(testing::kDestinationIp)};
  EXPECT_EQ(encode_cma_ip_header(ip, req.private_data), CmaHeaderError::kNone);
  return req;
}

Expected req_expectations(const ReqMessage& m) {
  const std::string p = "infiniband.cm.req.";
  return {
      {"infiniband.bth.destqp", 1u}, {"infiniband.deth.q_key", 0x80010000u},
      {"infiniband.mad.baseversion", 1u}, {"infiniband.mad.mgmtclass", 7u},
      {"infiniband.mad.classversion", 2u}, {"infiniband.mad.method", 3u},
      {"infiniband.mad.transactionid", kTid}, {"infiniband.mad.attributemodifier", 0u},
      {"infiniband.cm.req", m.local_comm_id}, {p + "serviceid.protocol", 0x06u},
      {p + "serviceid.dport", 8080u}, {p + "localcaguid", m.local_ca_guid},
      {p + "localqkey", m.local_qkey}, {p + "localqpn", m.local_qpn},
      {p + "responderres", m.responder_resources}, {p + "localeecn", m.local_eecn},
      {p + "initdepth", m.initiator_depth}, {p + "remoteeecn", m.remote_eecn},
      {p + "remoteresptout", m.remote_cm_response_timeout}, {p + "transpsvctype", 1u},
      {p + "e2eflowctrl", 1u}, {p + "startpsn", m.starting_psn},
      {p + "localresptout", m.local_cm_response_timeout}, {p + "retrcount", m.retry_count},
      {p + "pkey", m.pkey}, {p + "pppmtu", m.path_mtu}, {p + "rdcexist", 1u},
      {p + "rnrretrcount", m.rnr_retry_count}, {p + "maxcmretr", m.max_cm_retries},
      {p + "srq", 1u}, {p + "ext_transport", m.extended_transport_type},
      {p + "prim_locallid", m.primary_path.local_port_lid},
      {p + "prim_remotelid", m.primary_path.remote_port_lid},
      // On IPv4 RoCE Wireshark shows a GID's last 4 bytes as an address.
      {p + "prim_localgid_ipv4", std::string("172.173.174.175")},
      {p + "prim_remotegid_ipv4", std::string("188.189.190.191")},
      {p + "prim_tfcclass", m.primary_path.traffic_class},
      {p + "prim_hoplim", m.primary_path.hop_limit}, {p + "prim_sl", m.primary_path.sl},
      {p + "prim_subnetlocal", 1u}, {p + "prim_localacktout", m.primary_path.local_ack_timeout},
      {p + "alt_locallid", m.alternate_path.local_port_lid},
      {p + "alt_remotelid", m.alternate_path.remote_port_lid},
      {p + "alt_localgid", hex(m.alternate_path.local_port_gid)},
      {p + "alt_remotegid", hex(m.alternate_path.remote_port_gid)},
      {p + "alt_tfcclass", m.alternate_path.traffic_class},
      {p + "alt_hoplim", m.alternate_path.hop_limit}, {p + "alt_sl", m.alternate_path.sl},
      {p + "alt_subnetlocal", 0u}, {p + "alt_localacktout", m.alternate_path.local_ack_timeout},
      {p + "ip_cm.majv", 0u}, {p + "ip_cm.ipv", 4u}, {p + "ip_cm.sport", 50000u},
      {p + "ip_cm.sip4", std::string("192.168.1.10")},
      {p + "ip_cm.dip4", std::string("192.168.1.20")},
      {p + "ip_cm.private", hex(m.private_data, kCmaIpHeaderBytes)},
  };
}

Expected rep_expectations(const RepMessage& m) {
  const std::string p = "infiniband.cm.rep.";
  return {
      {"infiniband.cm.rep", m.local_comm_id}, {p + "remotecommid", m.remote_comm_id},
      {p + "localqkey", m.local_qkey}, {p + "localqpn", m.local_qpn},
      {p + "localeecn", m.local_eecn}, {p + "startpsn", m.starting_psn},
      {p + "respres", m.responder_resources}, {p + "initdepth", m.initiator_depth},
      {p + "tgtackdelay", m.target_ack_delay}, {p + "failoveracc", m.failover_accepted},
      {p + "e2eflowctrl", 1u}, {p + "rnrretrcount", m.rnr_retry_count}, {p + "srq", 1u},
      {p + "localcaguid", m.local_ca_guid}, {p + "private", hex(m.private_data)},
  };
}

Expected rej_expectations(const RejMessage& m) {
  const std::string p = "infiniband.cm.rej.";
  return {
      {p + "localcommid", m.local_comm_id}, {p + "remotecommid", m.remote_comm_id},
      {p + "msgrej", 2u}, {p + "rejinfolen", m.reject_info_length}, {p + "reason", 28u},
      {p + "ari", hex(m.ari)}, {p + "private", hex(m.private_data)},
  };
}

template <typename M>
Expected ids_and_private(const std::string& prefix, const M& m) {
  return {{prefix + "localcommid", m.local_comm_id},
          {prefix + "remotecommid", m.remote_comm_id},
          {prefix + "private", hex(m.private_data)}};
}

std::vector<std::string> all_fields(const std::vector<Expected>& frames) {
  std::vector<std::string> fields = {"infiniband.mad.attributeid", "_ws.malformed"};
  for (const Expected& frame : frames) {
    for (const auto& [field, value] : frame) fields.push_back(field);
  }
  return fields;
}

TEST(CmTshark, WiresharkReadsTheMessagesAsIbCm) {
  if (!have_tshark()) GTEST_SKIP() << "tshark not installed (apt-get install tshark)";
  const ReqMessage req = req_with_ip_header();
  const std::vector<CmMessage> messages = {
      req, testing::sample_rep(), testing::sample_rej(), testing::sample_rtu(),
      testing::sample_dreq(), testing::sample_drep(), testing::sample_mra(),
      testing::sample_sidr_req(), testing::sample_sidr_rep()};
  const std::vector<Expected> expected = {
      req_expectations(req),
      rep_expectations(testing::sample_rep()),
      rej_expectations(testing::sample_rej()),
      ids_and_private("infiniband.cm.rtu.", testing::sample_rtu()),
      {{"infiniband.cm.dreq.localcommid", 0xdeadbeefu},
       {"infiniband.cm.dreq.remotecommid", 0xfeedfaceu},
       {"infiniband.cm.req.remoteqpneecn", 0x7a7b7cu},
       {"infiniband.cm.dreq.private", hex(testing::sample_dreq().private_data)}},
      ids_and_private("infiniband.cm.drsp.", testing::sample_drep()),
      {}, {}, {}};  // MRA, SIDR_REQ, SIDR_REP: named only

  std::vector<std::vector<uint8_t>> frames;
  for (const CmMessage& message : messages) {
    std::array<uint8_t, kMadBytes> mad{};
    ASSERT_TRUE(encode_cm_mad({kTid, 0, message}, mad).ok());
    frames.push_back(testing::roce_v2_frame(mad, static_cast<uint32_t>(frames.size())));
  }
  const std::string pcap =
      ::testing::TempDir() + "cm_messages_" + std::to_string(getpid()) + ".pcap";
  ASSERT_TRUE(testing::write_pcap(pcap, frames));
  const std::vector<FrameFields> seen = tshark_fields(pcap, all_fields(expected));
  std::remove(pcap.c_str());

  ASSERT_EQ(seen.size(), messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    const int number = static_cast<int>(i + 1);
    expect_fields(seen[i], {{"infiniband.mad.attributeid",
                             uint64_t{static_cast<uint16_t>(attribute_id(messages[i]))}},
                            {"_ws.malformed", std::string()}},
                  number);
    expect_fields(seen[i], expected[i], number);
  }
}

}  // namespace
}  // namespace softverbs::cm
