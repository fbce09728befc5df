// The QP's packets out: the headers of its frames, and handing them to the
// engine's wire unless its port is down.
#include "emulator/objects/qp_impl.h"
#include "emulator/trace/protocol_events.h"

namespace softverbs {

namespace {

packet::Headers headers_to(const DeviceDescription& self_dev, uint8_t port,
                           const AddressVector& av, uint32_t dest_qp, packet::Opcode opcode,
                           uint32_t psn) {
  packet::Headers h;
  h.lrh.sl = av.sl;
  h.lrh.slid = self_dev.lid_of(port);
  h.lrh.dlid = av.dlid;
  if (av.is_global) {
    h.has_grh = true;
    h.grh.traffic_class = av.traffic_class;
    h.grh.flow_label = av.flow_label;
    h.grh.hop_limit = av.hop_limit;
    const std::vector<GidEntry>& gids = self_dev.gids_of(port);
    h.grh.sgid = av.sgid_index < gids.size() ? gids[av.sgid_index].gid : Gid{};
    h.grh.dgid = av.dgid;
  }
  h.bth.opcode = opcode;
  h.bth.pkey = kDefaultPkey;
  h.bth.dest_qp = dest_qp;
  h.bth.psn = psn & packet::kPsnMask;
  return h;
}

}  // namespace

packet::Headers QpImpl::make_headers(packet::Opcode opcode, uint32_t psn) const {
  if (is_xrc(type)) opcode = packet::xrc_opcode(opcode);
  packet::Headers h =
      headers_to(hca->description(), attr.port_num, attr.av, attr.dest_qp_num, opcode, psn);
  h.bth.mig_req = migration_request_bit();
  return h;
}

packet::Headers QpImpl::make_datagram_headers(const SendWqe& w, uint32_t psn) const {
  const bool imm = w.opcode == WrOpcode::kSendWithImm;
  packet::Headers h =
      headers_to(hca->description(), attr.port_num, w.ud.av, w.ud.qpn,
                 imm ? packet::Opcode::kUdSendOnlyImm : packet::Opcode::kUdSendOnly, psn);
  h.bth.solicited = (w.flags & kWrSolicited) != 0;
  h.deth.qkey = w.ud.qkey;
  h.deth.src_qp = qpn;
  h.imm_data = w.imm_data;
  return h;
}

void QpImpl::transmit_to(const WireAddress& dst, const packet::Headers& h,
                         std::span<const uint8_t> payload) {
  if (!port_up()) {
    ++counters.port_down_drops;  // a downed link carries nothing
    return;
  }
  ++counters.packets_sent;
  trace::packet_sent(*this, h);
  engine->transmit(sent_from_here(dst), h, payload);
}

WcStatus QpImpl::transmit_gathered_to(const WireAddress& dst, const packet::Headers& h,
                                      const Sge* sges, uint32_t num_sge, uint64_t offset,
                                      uint32_t length) {
  struct FromSges final : PayloadGatherer {
    const QpImpl& qp;
    const Sge* sges;
    uint32_t num_sge;
    uint64_t offset;
    FromSges(const QpImpl& q, const Sge* s, uint32_t n, uint64_t o)
        : qp(q), sges(s), num_sge(n), offset(o) {}
    WcStatus gather(std::span<uint8_t> into) override {
      return qp.gather(sges, num_sge, offset, into);
    }
  } source(*this, sges, num_sge, offset);
  const bool link_up = port_up();
  // Traced before it goes, as transmit_to does: a fault applied to it
  // follows. Should its payload not be read, the WQE's error follows.
  if (link_up) trace::packet_sent(*this, h);
  const WcStatus st = engine->transmit_gathered(sent_from_here(dst), h, length, link_up, source);
  if (st == WcStatus::kSuccess) {
    if (link_up)
      ++counters.packets_sent;
    else
      ++counters.port_down_drops;  // a downed link carries nothing
  }
  return st;
}

void QpImpl::transmit_run(const RunFrame& run) {
  if (!port_up()) {
    counters.port_down_drops += run.packets;
    return;
  }
  counters.packets_sent += run.packets;
  ++counters.runs_sent;
  trace::run_sent(*this, run);
  engine->transmit_run(sent_from_here(destination()), run);
}

}  // namespace softverbs
