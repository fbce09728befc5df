// The softverbs control interface (provider/include/softverbs/control.h) as
// a test sees it: looked up at run time, so the same test binary still runs
// on rxe or a real HCA, where fault tests skip.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "harness/testsupport/errors.h"

namespace softverbs::testsupport {

// True when softverbs_control is loaded in this process (LD_PRELOAD of
// libsoftverbs.so); only then do the other functions here do anything.
bool soft_control_available();

// Sends one control request ("fault set drop:p=1", "port softverbs0 down",
// "rnr all", "stats", ...) to this process's soft HCA. Returns 0, EINVAL
// when refused (the reply says why), ENOSYS when the interface is absent,
// or the errno softverbs_control returned.
Errno soft_control(std::string_view request, std::string& reply);
Errno soft_control(std::string_view request);

// Puts this process's soft HCA back to normal when it goes out of scope: no
// fault plan, no forced RNR, the named device's port up. A test that changes
// any of them holds one, so the next test in the same process starts clean.
class SoftControlReset {
 public:
  explicit SoftControlReset(std::string device_name) : device_name_(std::move(device_name)) {}
  ~SoftControlReset();
  SoftControlReset(const SoftControlReset&) = delete;
  SoftControlReset& operator=(const SoftControlReset&) = delete;

 private:
  std::string device_name_;
};

// Reads one counter out of a `stats` reply:
//   qp_counter(stats, 0x12, "rnr_naks_received")  from the line "  qp 0x000012 RC ...: ..."
//   line_counter(stats, "faults tx:", "dropped")    from the line that starts with the label
// nullopt when the line or the counter is not there.
std::optional<uint64_t> qp_counter(std::string_view stats, uint32_t qpn, std::string_view name);
std::optional<uint64_t> line_counter(std::string_view stats, std::string_view line_label,
                                     std::string_view name);

}  // namespace softverbs::testsupport
