#include "emulator/control/control_commands.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <shared_mutex>
#include <sstream>
#include <vector>

#include "emulator/control/capture_requests.h"
#include "emulator/engine/engine.h"
#include "emulator/fault/fault_injector.h"
#include "emulator/objects/hca_impl.h"
#include "emulator/objects/qp_impl.h"

namespace softverbs::control {
namespace {

std::string program_name() {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

void write_counters(std::ostringstream& out, const QpCounters& c) {
#define SOFTVERBS_PRINT_COUNTER(name, help) out << " " #name "=" << c.name;
  SOFTVERBS_QP_COUNTERS(SOFTVERBS_PRINT_COUNTER)
#undef SOFTVERBS_PRINT_COUNTER
  out << "\n";
}

void write_fault_counts(std::ostringstream& out, const char* label, const fault::FaultCounts& c) {
  out << label << ": matched=" << c.matched << " dropped=" << c.dropped
      << " duplicated=" << c.duplicated << " reordered=" << c.reordered
      << " delayed=" << c.delayed << " corrupted=" << c.corrupted << " rnr=" << c.rnr << "\n";
}

// One QP's counters and where its queues and PSNs stand: what a stuck
// transfer waits for.
void write_qp(std::ostringstream& out, QpImpl& qp) {
  std::lock_guard lock(qp.mutex);
  TargetEntryScope entry(qp);  // takes up what initiators executed directly
  char qpn[16];
  std::snprintf(qpn, sizeof qpn, "0x%06x", qp.qpn);
  out << "  qp " << qpn << " " << to_string(qp.type) << " "
      << to_string(qp.attr.state) << ":";
  write_counters(out, qp.current_counters());
  out << "    send_queue posted=" << qp.sq.tail - qp.sq.head
      << " unsent=" << qp.sq.tail - qp.sq.next << " next_psn=" << qp.requester.next_psn()
      << " unacked_psn=" << qp.completer.unacked_psn()
      << " window=" << qp.requester.window().packets()
      << " rd_atomic_outstanding=" << qp.requester.rd_atomic_outstanding()
      << " retransmit_timer=" << (qp.completer.retransmit_armed() ? "armed" : "off")
      << " rnr_wait=" << (qp.completer.waiting_for_rnr() ? "yes" : "no")
      << " retries_left=" << int(qp.completer.retries_left())
      << " receive_queue posted=" << qp.rq.posted()
      << " expected_psn=" << qp.responder.expected_psn() << "\n";
}

// The device's memory regions: how many share their pages with peers
// (reached by a memcpy), how many will once a peer reaches them
// (deferred_sharing.h; until then by system calls), how many are reached
// by system calls, and each one up to kMrsListed.
void write_mrs(std::ostringstream& out, Hca::Impl& impl) {
  constexpr size_t kMrsListed = 32;
  std::shared_lock lock(impl.mr_mutex);
  std::vector<const Mr*> mrs;
  for (const auto& [key, mr] : impl.mrs_by_key)
    if (mr->kind() == MrKind::kMemory) mrs.push_back(mr);
  std::sort(mrs.begin(), mrs.end(),
            [](const Mr* a, const Mr* b) { return a->lkey() < b->lkey(); });
  uint64_t shared = 0, shared_bytes = 0, deferred = 0;
  for (const Mr* mr : mrs)
    if (mr->shared_pages()) {
      ++shared;
      shared_bytes += mr->length();
    } else if (mr->sharing_deferred()) {
      ++deferred;
    }
  out << "mrs: registered=" << mrs.size() << " shared_pages=" << shared
      << " shared_bytes=" << shared_bytes << " shared_when_reached=" << deferred
      << " by_system_call=" << mrs.size() - shared << "\n";
  auto pages_of = [](const Mr& mr) {
    if (mr.shared_pages()) return "shared";
    if (mr.sharing_deferred()) return "shared_when_reached";
    return mr.on_demand() ? "on_demand" : "private";
  };
  for (size_t i = 0; i < mrs.size() && i < kMrsListed; ++i)
    out << "  mr lkey=" << mrs[i]->lkey() << " length=" << mrs[i]->length()
        << " pages=" << pages_of(*mrs[i]) << "\n";
  if (mrs.size() > kMrsListed) out << "  ... " << mrs.size() - kMrsListed << " more\n";
}

void write_device(std::ostringstream& out, Engine& engine, Hca& hca) {
  Hca::Impl& impl = hca.impl();
  std::lock_guard lock(impl.objects_mutex);
  QpCounters total = impl.destroyed_qp_counters;
  for (QpImpl* qp : impl.qps) {
    std::lock_guard qp_lock(qp->mutex);
    total += qp->current_counters();
  }
  out << "device " << impl.description.name;
  for (uint8_t p = 1; p <= impl.description.port_count(); ++p)
    out << " port " << int(p) << (engine.port_up(impl.description.index, p) ? " ACTIVE" : " DOWN");
  out << ":";
  write_counters(out, total);
  for (QpImpl* qp : impl.qps) write_qp(out, *qp);
}

std::string stats(Engine& engine) {
  std::ostringstream out;
  out << "process " << getpid() << " " << program_name() << "\n";
  const EngineCounters e = engine.counters();
  out << "engine: frames_sent=" << e.frames_sent << " frames_received=" << e.frames_received
      << " dropped_malformed=" << e.frames_dropped_malformed
      << " dropped_bad_icrc=" << e.frames_dropped_bad_icrc
      << " dropped_no_qp=" << e.frames_dropped_no_qp
      << " dropped_unroutable=" << e.frames_dropped_unroutable
      << " dropped_port_down=" << e.frames_dropped_port_down
      << " intake_by_event_waiter=" << e.intake_by_event_waiter << "\n";
  const WireCounters w = engine.wire().counters();
  out << "wire: frames_sent=" << w.frames_sent << " frames_received=" << w.frames_received
      << " frames_deferred=" << w.frames_deferred << " frames_unroutable=" << w.frames_unroutable
      << "\n";
  if (w.udp_datagrams_sent || w.udp_datagrams_received || w.udp_send_failures)
    out << "udp: datagrams_sent=" << w.udp_datagrams_sent
        << " datagrams_received=" << w.udp_datagrams_received
        << " send_failures=" << w.udp_send_failures
        << " segmented_sends=" << w.udp_segmented_sends
        << " segmented_datagrams=" << w.udp_segmented_datagrams
        << " coalesced_receives=" << w.udp_coalesced_receives
        << " coalesced_datagrams=" << w.udp_coalesced_datagrams
        << " dropped_malformed=" << w.udp_dropped_malformed
        << " dropped_bad_icrc=" << w.udp_dropped_bad_icrc
        << " dropped_not_here=" << w.udp_dropped_not_here << "\n";
  if (fault::FaultInjector* f = engine.fault_injector()) {
    const fault::Counters c = f->fault_counters();
    out << "fault plan: " << fault::to_string(f->plan()) << "\n";
    write_fault_counts(out, "faults", c);
    write_fault_counts(out, "faults tx", c.tx);
    write_fault_counts(out, "faults rx", c.rx);
  }
  engine.for_each_hca([&](Hca& hca) {
    write_device(out, engine, hca);
    write_mrs(out, hca.impl());  // after: not under the objects' lock
  });
  return out.str();
}

std::string fault_command(Engine& engine, std::string_view args) {
  fault::FaultInjector* f = engine.fault_injector();
  if (!f) return "error: this process has no fault injector\n";
  auto space = args.find(' ');
  std::string_view verb = args.substr(0, space);
  std::string_view rest = space == std::string_view::npos ? "" : args.substr(space + 1);
  if (verb == "show") return fault::to_string(f->plan()) + "\n";
  if (verb == "clear") {
    f->set_plan(fault::Plan{});
    engine.same_host().fault_plan_changed();
    return "ok: no faults\n";
  }
  if (verb == "set") {
    fault::Plan plan;
    std::string error;
    if (!fault::parse_plan(rest, plan, error)) return "error: " + error + "\n";
    f->set_plan(plan);
    engine.same_host().fault_plan_changed();
    return "ok: " + fault::to_string(plan) + "\n";
  }
  return "error: unknown fault request '" + std::string(verb) + "' (use show, clear or set SPEC)\n";
}

// "DEVICE [PORT] up|down"; PORT defaults to 1.
std::string port_command(Engine& engine, std::string_view args) {
  std::vector<std::string_view> words;
  for (size_t at = 0; at < args.size();) {
    const size_t space = std::min(args.find(' ', at), args.size());
    if (space > at) words.push_back(args.substr(at, space - at));
    at = space + 1;
  }
  const std::string_view state = words.empty() ? "" : words.back();
  const bool port_given = words.size() == 3;
  if ((words.size() != 2 && !port_given) || (state != "up" && state != "down"))
    return "error: say 'port DEVICE [PORT] up' or 'port DEVICE [PORT] down'\n";
  const std::string device(words[0]);
  for (const auto& d : configured_devices()) {
    if (d.name != device) continue;
    uint8_t port = 1;
    if (port_given) {
      if (words[1].size() != 1 || !d.has_port(static_cast<uint8_t>(words[1][0] - '0')))
        return "error: " + device + " has no port '" + std::string(words[1]) + "' (it has " +
               std::to_string(d.port_count()) + ")\n";
      port = static_cast<uint8_t>(words[1][0] - '0');
    }
    engine.set_port_up(d.index, port, state == "up");
    return "ok: " + device + " port " + std::to_string(port) + " " + std::string(state) + "\n";
  }
  return "error: no soft device named '" + device + "'\n";
}

std::string rnr_command(Engine& engine, std::string_view args) {
  if (args == "off") {
    engine.set_forced_rnr_qpn(0);
    return "ok: forced RNR off\n";
  }
  if (args == "all") {
    engine.set_forced_rnr_qpn(Engine::kAllQps);
    return "ok: forced RNR on every QP\n";
  }
  std::string text(args);
  char* end = nullptr;
  unsigned long qpn = std::strtoul(text.c_str(), &end, 0);
  if (text.empty() || *end || qpn == 0 || qpn > 0xffffff)
    return "error: say 'rnr off', 'rnr all' or 'rnr QPN' (e.g. rnr 0x12)\n";
  engine.set_forced_rnr_qpn(static_cast<uint32_t>(qpn));
  return "ok: forced RNR on QP " + text + "\n";
}

}  // namespace

std::string handle_request(Engine& engine, std::string_view request) {
  while (!request.empty() && (request.back() == '\r' || request.back() == ' '))
    request.remove_suffix(1);
  auto space = request.find(' ');
  std::string_view verb = request.substr(0, space);
  std::string_view args = space == std::string_view::npos ? "" : request.substr(space + 1);
  if (verb == "stats") return stats(engine);
  if (verb == "fault") return fault_command(engine, args);
  if (verb == "port") return port_command(engine, args);
  if (verb == "rnr") return rnr_command(engine, args);
  if (verb == "capture") return capture_request(engine, args);
  return "error: unknown request '" + std::string(verb) +
         "' (known: stats, fault show|clear|set SPEC, port DEVICE up|down, rnr off|all|QPN, "
         "capture start FILE|stop)\n";
}

}  // namespace softverbs::control
