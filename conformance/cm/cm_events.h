// Taking CM events with a deadline: the channel's fd is polled, so a test
// that waits for an event that never comes fails instead of blocking in
// rdma_get_cm_event. Each event is copied (its private data too) and acked
// at once, so no test holds an event that would block rdma_destroy_id.
#pragma once

#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "conformance/cm/forked_peer.h"

namespace softverbs::conformance::cm {

// How long a test waits for an event that must come.
inline constexpr std::chrono::milliseconds kEventTimeout = 10s;

struct CmEvent {
  bool received = false;
  int error = 0;  // errno of poll or rdma_get_cm_event when nothing was received
  rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_ERROR;
  int status = 0;
  rdma_cm_id* id = nullptr;
  rdma_cm_id* listen_id = nullptr;
  // The parameters with their private_data pointers cleared: conn for RC
  // ids, ud for UD ids (as librdmacm fills them).
  rdma_conn_param conn{};
  rdma_ud_param ud{};
  // ud.private_data as delivered: for MULTICAST_JOIN, the context given to
  // rdma_join_multicast.
  const void* ud_private_data_pointer = nullptr;
  // The private_data_len bytes the event carried.
  std::vector<uint8_t> private_data;

  std::string describe() const;
};

// The next event on `channel`, or one with received == false if none came
// within `timeout`.
CmEvent next_event(rdma_event_channel* channel, std::chrono::milliseconds timeout = kEventTimeout);

// `event` was received, is `type` and has `status`.
::testing::AssertionResult is_event(const CmEvent& event, rdma_cm_event_type type, int status = 0);

// No event is queued on `channel` for `window` (the fd does not become
// readable).
::testing::AssertionResult no_event_within(rdma_event_channel* channel,
                                           std::chrono::milliseconds window);

// `data` starts with `expected` and every later byte is zero.
::testing::AssertionResult is_padded_copy(const std::vector<uint8_t>& data,
                                          const std::vector<uint8_t>& expected);

// The bytes of a string literal, without its terminator.
std::vector<uint8_t> bytes_of(const char* text);

}  // namespace softverbs::conformance::cm
