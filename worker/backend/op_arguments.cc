#include "worker/backend/op_arguments.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace fsdpd {

absl::Status OpArguments::Error(const std::string& message) const {
  return absl::InvalidArgumentError(absl::StrCat(op_, ": ", message));
}

absl::Status OpArguments::Present(const Tensor& t, const char* name) const {
  if (t.data == nullptr) return Error(absl::StrCat(name, " has no data (", t.Describe(), ")"));
  for (int64_t d : t.shape) {
    if (d < 0) return Error(absl::StrCat(name, " has a negative dimension: ", t.Describe()));
  }
  return absl::OkStatus();
}

absl::Status OpArguments::Typed(const Tensor& t, const char* name, DType dtype) const {
  FSDPD_RETURN_IF_ERROR(Present(t, name));
  if (t.dtype != dtype) {
    return Error(absl::StrCat(name, " must be ", DTypeName(dtype), ", got ", t.Describe()));
  }
  return absl::OkStatus();
}

absl::Status OpArguments::FloatingPoint(const Tensor& t, const char* name) const {
  FSDPD_RETURN_IF_ERROR(Present(t, name));
  if (t.dtype != DType::kF32 && t.dtype != DType::kBF16) {
    return Error(absl::StrCat(name, " must be f32 or bf16, got ", t.Describe()));
  }
  return absl::OkStatus();
}

absl::Status OpArguments::Shaped(const Tensor& t, const char* name,
                                 const std::vector<int64_t>& shape) const {
  FSDPD_RETURN_IF_ERROR(Present(t, name));
  if (t.shape != shape) {
    return Error(absl::StrCat(name, " must be ", DTypeName(t.dtype), "[",
                              absl::StrJoin(shape, ", "), "], got ", t.Describe()));
  }
  return absl::OkStatus();
}

absl::Status OpArguments::Rows(const Tensor& t, const char* name, int64_t rows, int64_t width,
                               const std::string& why) const {
  FSDPD_RETURN_IF_ERROR(Present(t, name));
  if (t.shape.empty() || t.shape.back() != width || t.numel() != rows * width) {
    return Error(absl::StrCat(name, " must hold ", rows, " rows of ", width, " (", why, "), got ",
                              t.Describe()));
  }
  return absl::OkStatus();
}

absl::Status OpArguments::SameCount(const Tensor& t, const char* name, const Tensor& reference,
                                    const char* reference_name) const {
  FSDPD_RETURN_IF_ERROR(Present(t, name));
  if (t.numel() != reference.numel()) {
    return Error(absl::StrCat(name, " ", t.Describe(), " must have as many elements as ",
                              reference_name, " ", reference.Describe()));
  }
  return absl::OkStatus();
}

absl::Status OpArguments::Scalar(const Tensor& t, const char* name) const {
  FSDPD_RETURN_IF_ERROR(Present(t, name));
  if (t.numel() != 1) {
    return Error(absl::StrCat(name, " must be a single value, got ", t.Describe()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> OpArguments::Width(const Tensor& t, const char* name) const {
  FSDPD_RETURN_IF_ERROR(Present(t, name));
  if (t.shape.empty()) return Error(absl::StrCat(name, " must have at least one dimension"));
  return t.shape.back();
}

absl::Status OpArguments::Matrix(const Tensor& t, const char* name) const {
  FSDPD_RETURN_IF_ERROR(Present(t, name));
  if (t.shape.size() != 2) {
    return Error(absl::StrCat(name, " must be a matrix, got ", t.Describe()));
  }
  return absl::OkStatus();
}

absl::Status OpArguments::Disjoint(const Tensor& out, const char* out_name, const Tensor& in,
                                   const char* in_name) const {
  if (!Overlaps(out, in)) return absl::OkStatus();
  return Error(absl::StrCat(out_name, " ", out.Describe(), " overlaps ", in_name, " ",
                            in.Describe(), "; this op cannot write over its inputs"));
}

absl::Status OpArguments::SameOrDisjoint(const Tensor& out, const char* out_name, const Tensor& in,
                                         const char* in_name) const {
  if (out.data == in.data && out.dtype == in.dtype && out.numel() == in.numel()) {
    return absl::OkStatus();
  }
  if (!Overlaps(out, in)) return absl::OkStatus();
  return Error(absl::StrCat(out_name, " ", out.Describe(), " partly overlaps ", in_name, " ",
                            in.Describe(), "; it must be exactly ", in_name,
                            " (in place) or not share memory with it"));
}

int64_t RowsOf(const Tensor& t) {
  return t.shape.empty() ? 0 : t.numel() / std::max<int64_t>(t.shape.back(), 1);
}

bool Overlaps(const Tensor& a, const Tensor& b) {
  if (a.data == nullptr || b.data == nullptr) return false;
  const int64_t a_bytes = a.bytes();
  const int64_t b_bytes = b.bytes();
  if (a_bytes <= 0 || b_bytes <= 0) return false;
  const auto a_begin = reinterpret_cast<uintptr_t>(a.data);
  const auto b_begin = reinterpret_cast<uintptr_t>(b.data);
  return a_begin < b_begin + static_cast<uintptr_t>(b_bytes) &&
         b_begin < a_begin + static_cast<uintptr_t>(a_bytes);
}

}  // namespace fsdpd
