// Argument checks for the ops contract (worker/backend/ops.h), shared by CheckedOps (shapes,
// counts, aliasing) and the backends' ops (dtypes). Each failure is INVALID_ARGUMENT naming the
// op, the argument and its Describe()d tensor, so a caller sees exactly what did not fit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/backend/tensor.h"

namespace fsdpd {

class OpArguments {
 public:
  explicit OpArguments(const char* op) : op_(op) {}

  absl::Status Error(const std::string& message) const;

  // Has data and no negative dimension.
  absl::Status Present(const Tensor& t, const char* name) const;
  // Present and of this dtype.
  absl::Status Typed(const Tensor& t, const char* name, DType dtype) const;
  // Present and f32 or bf16.
  absl::Status FloatingPoint(const Tensor& t, const char* name) const;
  // Present and of exactly this shape (any dtype; the message shows the tensor's own).
  absl::Status Shaped(const Tensor& t, const char* name, const std::vector<int64_t>& shape) const;
  // Present and `rows` rows of `width` (any leading shape, last dimension `width`).
  absl::Status Rows(const Tensor& t, const char* name, int64_t rows, int64_t width,
                    const std::string& why) const;
  // Present and as many elements as `reference`.
  absl::Status SameCount(const Tensor& t, const char* name, const Tensor& reference,
                         const char* reference_name) const;
  // Present and a single element.
  absl::Status Scalar(const Tensor& t, const char* name) const;
  // The last dimension of a present tensor with at least one dimension.
  absl::StatusOr<int64_t> Width(const Tensor& t, const char* name) const;
  // Present with two dimensions.
  absl::Status Matrix(const Tensor& t, const char* name) const;
  // The output `out` shares no byte with `in`.
  absl::Status Disjoint(const Tensor& out, const char* out_name, const Tensor& in,
                        const char* in_name) const;
  // The output `out` either is exactly `in` (same bytes, element for element) or shares no
  // byte with it: what an element-wise kernel can handle.
  absl::Status SameOrDisjoint(const Tensor& out, const char* out_name, const Tensor& in,
                              const char* in_name) const;

 private:
  const char* op_;
};

// The rows of a tensor viewed as [rows, last dimension]; 0 for a scalar shape.
int64_t RowsOf(const Tensor& t);

// Whether two tensors share at least one byte (empty tensors share none).
bool Overlaps(const Tensor& a, const Tensor& b);

}  // namespace fsdpd
