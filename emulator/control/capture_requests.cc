#include "emulator/control/capture_requests.h"

#include <memory>
#include <mutex>
#include <vector>

#include "emulator/capture/packet_capture.h"
#include "emulator/engine/engine.h"
#include "emulator/fault/fault_injector.h"

namespace softverbs::control {
namespace {

using capture::CaptureSettings;
using capture::PacketCapture;

std::mutex g_mutex;
PacketCapture* g_running = nullptr;

// A stopped capture may still be shown a frame that was on its way
// (FaultInjector::set_observer), so none is ever freed: each is a file
// handle's worth of memory, kept for the process's life.
void retire(std::unique_ptr<PacketCapture> capture) {
  static auto* retired = new std::vector<std::unique_ptr<PacketCapture>>;
  retired->push_back(std::move(capture));
}

// "[qp=..] [device=..] [limit-mb=..] FILE" into settings; an error text
// when a word is wrong.
std::string parse_start(std::string_view args, CaptureSettings& settings) {
  while (!args.empty()) {
    const size_t space = args.find(' ');
    const std::string_view word = args.substr(0, space);
    const size_t equals = word.find('=');
    const std::string_view key = word.substr(0, equals);
    const std::string_view value = equals == std::string_view::npos ? "" : word.substr(equals + 1);
    if (word.empty()) {
      args.remove_prefix(1);
    } else if (key == "qp" && equals != std::string_view::npos) {
      if (!capture::parse_qp_list(value, settings.filter.qpns))
        return "qp='" + std::string(value) + "' is not a list of QP numbers (e.g. qp=2,0x12)";
    } else if (key == "device" && equals != std::string_view::npos) {
      if (!capture::find_device_index(value, settings.filter.device_index))
        return "device='" + std::string(value) + "' names no soft device of this process";
    } else if (key == "limit-mb" && equals != std::string_view::npos) {
      if (!capture::parse_limit_mib(value, settings.limit_mib))
        return "limit-mb='" + std::string(value) + "' is not a size in MiB";
    } else {
      settings.path = std::string(args);  // the rest of the line
      break;
    }
    if (!word.empty()) args.remove_prefix(std::min(args.size(), word.size() + 1));
  }
  if (settings.path.empty() || settings.path.front() != '/')
    return "say where to write with an absolute path (capture start [qp=N,...] [device=NAME] "
           "[limit-mb=N] /PATH/FILE.pcapng)";
  return "";
}

std::string start(Engine& engine, fault::FaultInjector& injector, std::string_view args) {
  CaptureSettings settings;
  if (std::string problem = parse_start(args, settings); !problem.empty())
    return "error: " + problem + "\n";
  std::lock_guard lock(g_mutex);
  if (g_running) return "error: this process already captures to " + g_running->path() + "\n";
  if (injector.observed())
    return "error: this process has been captured since it started (softverbs capture -- "
           "PROGRAM); that capture lasts as long as the process\n";
  std::string error;
  std::unique_ptr<PacketCapture> capture = PacketCapture::open(settings, error);
  if (!capture) return "error: " + error + "\n";
  g_running = capture.get();
  injector.set_observer(g_running);
  retire(std::move(capture));
  // From now on every packet is a frame of its own: no runs.
  engine.same_host().fault_plan_changed();
  return "ok: capturing to " + g_running->path() + "\n";
}

std::string stop(Engine& engine, fault::FaultInjector& injector) {
  std::lock_guard lock(g_mutex);
  if (!g_running) return "error: this process runs no capture started with capture start\n";
  injector.set_observer(nullptr);
  engine.same_host().fault_plan_changed();
  g_running->stop();
  const capture::PcapngFile& file = g_running->file();
  std::string reply = "ok: " + std::to_string(file.packets_written()) + " packets written to " +
                      g_running->path();
  if (file.packets_over_limit())
    reply += " (" + std::to_string(file.packets_over_limit()) + " more past the size limit)";
  g_running = nullptr;
  return reply + "\n";
}

}  // namespace

std::string capture_request(Engine& engine, std::string_view args) {
  fault::FaultInjector* injector = engine.fault_injector();
  if (!injector) return "error: this process's wire cannot be observed\n";
  const size_t space = args.find(' ');
  const std::string_view verb = args.substr(0, space);
  const std::string_view rest = space == std::string_view::npos ? "" : args.substr(space + 1);
  if (verb == "start") return start(engine, *injector, rest);
  if (verb == "stop" && rest.empty()) return stop(engine, *injector);
  return "error: say 'capture start [qp=N,...] [device=NAME] [limit-mb=N] /PATH/FILE' or "
         "'capture stop'\n";
}

}  // namespace softverbs::control
