// A non-owning view of device memory with a dtype and a shape. Ops take views; buffers own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fsdpd {

enum class DType { kF32, kBF16, kI32 };

inline int64_t DTypeSize(DType dtype) { return dtype == DType::kBF16 ? 2 : 4; }
const char* DTypeName(DType dtype);

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t bytes() const { return numel() * DTypeSize(dtype); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  // "bf16[8, 1024, 2048]", for error messages.
  std::string Describe() const;
};

}  // namespace fsdpd
