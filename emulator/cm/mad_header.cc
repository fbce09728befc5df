#include "emulator/cm/mad_header.h"

#include "emulator/packet/byte_order.h"

namespace softverbs::cm {

using namespace packet::wire_order;

void encode_mad_header(const MadHeader& header,
                       std::span<uint8_t, kMadHeaderBytes> out) {
  uint8_t* p = out.data();
  p[0] = header.base_version;
  p[1] = header.mgmt_class;
  p[2] = header.class_version;
  p[3] = header.method;
  store_be16(p + 4, header.status);
  store_be16(p + 6, header.class_specific);
  store_be64(p + 8, header.transaction_id);
  store_be16(p + 16, header.attribute_id);
  store_be16(p + 18, 0);
  store_be32(p + 20, header.attribute_modifier);
}

MadHeader decode_mad_header(std::span<const uint8_t, kMadHeaderBytes> in) {
  const uint8_t* p = in.data();
  MadHeader header;
  header.base_version = p[0];
  header.mgmt_class = p[1];
  header.class_version = p[2];
  header.method = p[3];
  header.status = load_be16(p + 4);
  header.class_specific = load_be16(p + 6);
  header.transaction_id = load_be64(p + 8);
  header.attribute_id = load_be16(p + 16);
  header.attribute_modifier = load_be32(p + 20);
  return header;
}

}  // namespace softverbs::cm
