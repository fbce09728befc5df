// BTH opcode names as fault plans write them. A name may drop the RC_ prefix
// (RC is assumed), the RDMA_ infix, and shorten _WITH_IMMEDIATE/_WITH_INVALIDATE
// to _IMM/_INV; case and '-' vs '_' don't matter. So SEND_ONLY,
// rc_send_only and RC_SEND_ONLY all name opcode 0x04, and READ_REQUEST names
// RC_RDMA_READ_REQUEST. UC and UD opcodes need their prefix (UD_SEND_ONLY).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace softverbs::fault {

// A name as above, or a number 0..255 (decimal or 0x hex).
std::optional<uint8_t> parse_opcode(std::string_view text);

// The opcode table's name (RC_SEND_ONLY), or the number for an opcode
// softverbs does not know; parse_opcode() reads either back.
std::string opcode_text(uint8_t opcode);

}  // namespace softverbs::fault
