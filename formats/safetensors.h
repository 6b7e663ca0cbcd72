// Reading and writing safetensors files (the format of the `safetensors` Python package):
// an 8-byte little-endian header length, a JSON header of {name: {dtype, shape,
// data_offsets}} with optional "__metadata__", then the raw little-endian data.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fsdpd {

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // fp32 in memory; the file dtype is F32, or BF16/F16 on read
};

// Writes fp32 tensors atomically (temp file, fsync, rename).
absl::Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// A tensor to write without copying it first (exporting a large model from its flat buffers).
struct TensorView {
  std::string name;
  std::vector<int64_t> shape;
  const float* values = nullptr;  // product(shape) floats
};

// The streaming form of WriteSafetensors: same file, same checks, no copy of the data.
absl::Status WriteSafetensorsViews(const std::string& path, const std::vector<TensorView>& tensors,
                                   const std::map<std::string, std::string>& metadata = {});

// Reads every tensor, converting BF16/F16/F32 to fp32. A malformed header, overlapping or
// out-of-range offsets, or an unsupported dtype is a clear error, never a crash.
// I64/I32/I16/I8/U8/BOOL/F64 tensors are accepted too and converted to float (test fixtures
// store token ids that way). Tensors come back in file order (by data offset). When
// `metadata` is given, it receives the header's "__metadata__" strings (empty when absent).
absl::StatusOr<std::vector<NamedTensor>> ReadSafetensors(
    const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

// The same parser over bytes already in memory (the fuzz target; never crashes on any input).
// `source` names the bytes in error messages.
absl::StatusOr<std::vector<NamedTensor>> ParseSafetensors(
    std::string_view bytes, const std::string& source = "buffer",
    std::map<std::string, std::string>* metadata = nullptr);

}  // namespace fsdpd
