// Where a CM message field sits, in the IBTA's own notation, and the one
// place that moves bits between the wire and host-order values.
//
// The IBTA's message tables (Vol 1, chapter 12; "Table 106 REQ Message
// Contents" and its siblings) locate every field as Byte[Bit] plus a width:
// the byte offset from the start of the message data (which follows the
// 24-byte MAD header), the first bit counted from that byte's most
// significant bit, and the number of bits. A field may run across bytes
// (a 24-bit QPN, a 20-bit flow label) and is big-endian. Writing the tables
// down in that notation lets a reader hold them against the spec line by
// line, and keeps shifts and masks out of the per-message code.
#pragma once

#include <cstddef>
#include <cstdint>

namespace softverbs::cm {

// A field of 1 to 64 bits.
struct BitField {
  const char* name;  // for encode errors
  uint16_t byte;     // IBTA "Byte": offset from the start of the message data
  uint8_t bit;       // IBTA "Bit": 0 is the most significant bit of `byte`
  uint8_t width;     // bits

  constexpr uint64_t max() const {
    return width >= 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
  }
  // The whole bytes the field touches, and its distance from the last one's
  // least significant bit.
  constexpr unsigned bytes_touched() const { return (bit + width + 7u) / 8u; }
  constexpr unsigned shift() const { return bytes_touched() * 8u - bit - width; }
  // Fits one 64-bit load: every IBTA field does.
  constexpr bool valid() const {
    return width >= 1 && bit < 8 && bit + width <= 64;
  }
};

// A run of whole bytes copied as they are: GIDs, ARI, private data.
struct ByteField {
  const char* name;
  uint16_t byte;
  uint16_t length;
};

// One value stored in pieces at separate places, most significant piece
// first (the ECE vendor ID of REP and SIDR_REP, added to the IBTA tables
// by comment #9434 where reserved bits were free).
struct SplitField {
  const char* name;
  BitField high;
  BitField middle;  // width 0: absent
  BitField low;

  constexpr uint8_t width() const { return high.width + middle.width + low.width; }
};

// Reads `field` from `data`, the start of the message data.
inline uint64_t load_bits(const uint8_t* data, const BitField& field) {
  uint64_t word = 0;
  for (unsigned i = 0; i < field.bytes_touched(); ++i) {
    word = word << 8 | data[field.byte + i];
  }
  return (word >> field.shift()) & field.max();
}

// Writes the low `field.width` bits of `value`, leaving the neighbours'
// bits in the same bytes as they were.
inline void store_bits(uint8_t* data, const BitField& field, uint64_t value) {
  const unsigned n = field.bytes_touched();
  uint64_t word = 0;
  for (unsigned i = 0; i < n; ++i) word = word << 8 | data[field.byte + i];
  const uint64_t mask = field.max() << field.shift();
  word = (word & ~mask) | ((value << field.shift()) & mask);
  for (unsigned i = n; i-- > 0;) {
    data[field.byte + i] = static_cast<uint8_t>(word);
    word >>= 8;
  }
}

}  // namespace softverbs::cm
