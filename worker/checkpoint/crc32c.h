// CRC32C (Castagnoli), the checksum of checkpoint files. A small table-driven implementation:
// zlib only offers the IEEE polynomial, and CRC32C is what storage tools (gsutil, ext4, iSCSI)
// use, so a file's checksum can be compared with theirs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fsdpd {

// Continues a running checksum: Crc32cExtend(Crc32cExtend(0, a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

inline uint32_t Crc32c(std::string_view bytes) {
  return Crc32cExtend(0, bytes.data(), bytes.size());
}

}  // namespace fsdpd
