#include "worker/backend/tensor.h"

#include <string>

namespace fsdpd {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
  }
  return "unknown";
}

std::string Tensor::Describe() const {
  std::string text = DTypeName(dtype);
  text += "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  text += "]";
  if (data == nullptr) text += " (null)";
  return text;
}

}  // namespace fsdpd
