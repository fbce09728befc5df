// Waiting for work completions without ever waiting forever: a lost
// completion fails a test instead of hanging it.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "harness/testsupport/errors.h"

namespace softverbs::testsupport {

// Generous: only a hang guard, never a performance expectation.
inline constexpr std::chrono::milliseconds kCompletionTimeout{30'000};

// Polls `cq` until `count` more completions have been appended to `out`.
// ETIMEDOUT when `timeout` passes first (what arrived is still appended),
// EIO when ibv_poll_cq reports an error.
Errno poll_completions(ibv_cq* cq, size_t count, std::vector<ibv_wc>& out,
                       std::chrono::milliseconds timeout = kCompletionTimeout);

// Polls once and appends whatever is there; returns how many or -1.
int drain_completions(ibv_cq* cq, std::vector<ibv_wc>& out);

// "wr_id=7 status=IBV_WC_SUCCESS opcode=IBV_WC_SEND byte_len=12 qp_num=0x11"
std::string describe_completion(const ibv_wc& wc);

const char* wc_opcode_name(ibv_wc_opcode opcode);

}  // namespace softverbs::testsupport
