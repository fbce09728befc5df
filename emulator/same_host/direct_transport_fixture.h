// The fixture of the tests of direct execution through the transport
// (direct_transport_test.cc, direct_into_shared_pages_test.cc): the
// loopback wire lets an initiator execute on the target directly.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "emulator/same_host/shared_pages.h"
#include "emulator/transport/transport_test_fixture.h"

namespace softverbs {

class DirectTransport : public Transport {
 protected:
  void SetUp() override {
    Transport::SetUp();
    wire_->allow_direct(true);
  }
  // A signaled atomic on `remote_addr`, its former value into `result`.
  static SendRequest atomic(WrOpcode opcode, uint64_t wr_id, Sge& result, uint64_t remote_addr,
                            uint32_t rkey, uint64_t compare_add, uint64_t swap = 0) {
    SendRequest wr;
    wr.wr_id = wr_id;
    wr.opcode = opcode;
    wr.flags = kWrSignaled;
    wr.sges = {&result, 1};
    wr.remote_addr = remote_addr;
    wr.rkey = rkey;
    wr.compare_add = compare_add;
    wr.swap = swap;
    return wr;
  }
  static uint64_t word_at(const std::vector<uint8_t>& buffer, size_t offset) {
    uint64_t w = 0;
    std::memcpy(&w, buffer.data() + offset, sizeof w);
    return w;
  }
};

// Whether registrations share their pages, for one test's time.
class SharingPages {
 public:
  explicit SharingPages(bool on) : was_(SharedPages::enabled()) { SharedPages::set_enabled(on); }
  ~SharingPages() { SharedPages::set_enabled(was_); }

 private:
  bool was_;
};

}  // namespace softverbs
