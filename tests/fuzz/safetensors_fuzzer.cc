// libFuzzer target: the safetensors reader (init_from weights and fixtures come from users).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)fsdpd::ParseSafetensors(std::string_view(reinterpret_cast<const char*>(data), size),
                                "fuzz");
  return 0;
}
