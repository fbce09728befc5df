// Translation between the verbs ABI's structs and the soft HCA's own types.
// Pure functions: no state, no emulator calls, unit-tested on their own.
//
// Functions named from_ibv_* validate what the caller passed and return an
// Errno (EINVAL, EOPNOTSUPP) with the output untouched on failure; to_ibv_*
// cannot fail.
#pragma once

#include <cstring>
#include <infiniband/verbs.h>

#include <cstdint>

#include "emulator/attributes.h"
#include "emulator/types.h"

namespace softverbs::provider {

// The integer a caller stored in an enum-typed field. C lets a program
// store any int there; reading it as the C++ enum would be undefined for
// values outside the enum, so bad input is read as what it is and refused.
template <typename Enum>
int raw_value(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int));
  int value;
  std::memcpy(&value, &field, sizeof value);
  return value;
}


// --- device and port -------------------------------------------------------

void to_ibv_device_attr(const DeviceAttributes& in, ibv_device_attr& out);
void to_ibv_device_attr_ex(const DeviceAttributes& in, ibv_device_attr_ex& out);
void to_ibv_port_attr(const PortAttributes& in, ibv_port_attr& out);
ibv_gid to_ibv_gid(const Gid& gid);
Gid from_ibv_gid(const ibv_gid& gid);
bool is_zero_gid(const Gid& gid);

// --- enums -------------------------------------------------------------------

ibv_qp_state to_ibv_qp_state(QpState state);
Errno from_ibv_qp_state(int state, QpState& out);
ibv_mtu to_ibv_mtu(Mtu mtu);
Errno from_ibv_mtu(int mtu, Mtu& out);
Errno from_ibv_qp_type(int type, QpType& out);  // EOPNOTSUPP for XRC/raw
ibv_qp_type to_ibv_qp_type(QpType type);
ibv_wc_status to_ibv_wc_status(WcStatus status);
ibv_wc_opcode to_ibv_wc_opcode(WcOpcode opcode);
// False for an event the verbs ABI has no name for.
bool to_ibv_event_type(AsyncEventType type, ibv_event_type& out);

// --- access rights -----------------------------------------------------------

// The IBTA access bits of a QP (qp_access_flags); bits with no meaning for a
// QP are ignored, as HCAs do.
uint32_t qp_access_from_ibv(unsigned int ibv_access);
unsigned int access_to_ibv(uint32_t access);
// The rules of ibv_reg_mr(3): remote write or atomic need local write
// (EINVAL); unknown bits EINVAL; huge pages and flush access EOPNOTSUPP;
// optional-range bits (relaxed ordering) are dropped. Zero-based and
// on-demand are accepted and left out of `out` (they are no rights).
Errno mr_access_from_ibv(unsigned int ibv_access, uint32_t& out);

// --- QP attributes -----------------------------------------------------------

AddressVector from_ibv_ah_attr(const ibv_ah_attr& in);
void to_ibv_ah_attr(const AddressVector& in, ibv_ah_attr& out);
// Translates the attributes `ibv_mask` selects. EINVAL for a mask bit the
// soft HCA does not know or an out-of-range enum in a selected field.
Errno from_ibv_qp_attr(const ibv_qp_attr& in, int ibv_mask, QpAttributes& out,
                       uint32_t& mask);
void to_ibv_qp_attr(const QpAttributes& in, ibv_qp_attr& out);
QpCapabilities from_ibv_qp_cap(const ibv_qp_cap& in);
void to_ibv_qp_cap(const QpCapabilities& in, ibv_qp_cap& out);

// --- work requests and completions --------------------------------------------

// EINVAL for an opcode the soft HCA does not implement.
Errno from_ibv_wr_opcode(int opcode, WrOpcode& out);
uint32_t send_flags_from_ibv(unsigned int flags);
// Everything of a send WR except its SGEs and inline bytes, which the caller
// gathers into its own stack storage. EINVAL for an unknown opcode.
Errno from_ibv_send_wr(const ibv_send_wr& in, SendRequest& out);
void to_ibv_wc(const Completion& in, ibv_wc& out);
unsigned int to_ibv_wc_flags(uint32_t flags);  // WcFlags -> ibv_wc_flags
// The verbs sge and the HCA's one carry the same three fields.
inline Sge from_ibv_sge(const ibv_sge& in) { return Sge{in.addr, in.length, in.lkey}; }

}  // namespace softverbs::provider
