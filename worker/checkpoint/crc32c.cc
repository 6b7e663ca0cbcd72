#include "worker/checkpoint/crc32c.h"

#include <array>

namespace fsdpd {
namespace {

// Slicing-by-8 tables for the reflected Castagnoli polynomial: checkpoints are gigabytes,
// and eight table lookups per 8 bytes keep the checksum well below disk speed.
constexpr uint32_t kPolynomial = 0x82F63B78u;

struct Tables {
  std::array<std::array<uint32_t, 256>, 8> table{};
  Tables() {
    for (uint32_t byte = 0; byte < 256; ++byte) {
      uint32_t crc = byte;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
      table[0][byte] = crc;
    }
    for (uint32_t byte = 0; byte < 256; ++byte) {
      for (int slice = 1; slice < 8; ++slice) {
        const uint32_t previous = table[slice - 1][byte];
        table[slice][byte] = (previous >> 8) ^ table[0][previous & 0xFFu];
      }
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size) {
  const auto& table = GetTables().table;
  const auto* bytes = static_cast<const unsigned char*>(data);
  crc = ~crc;
  while (size >= 8) {
    const uint32_t low =
        crc ^ (static_cast<uint32_t>(bytes[0]) | (static_cast<uint32_t>(bytes[1]) << 8) |
               (static_cast<uint32_t>(bytes[2]) << 16) | (static_cast<uint32_t>(bytes[3]) << 24));
    crc = table[7][low & 0xFFu] ^ table[6][(low >> 8) & 0xFFu] ^ table[5][(low >> 16) & 0xFFu] ^
          table[4][low >> 24] ^ table[3][bytes[4]] ^ table[2][bytes[5]] ^ table[1][bytes[6]] ^
          table[0][bytes[7]];
    bytes += 8;
    size -= 8;
  }
  while (size-- > 0) crc = (crc >> 8) ^ table[0][(crc ^ *bytes++) & 0xFFu];
  return ~crc;
}

}  // namespace fsdpd
