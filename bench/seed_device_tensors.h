// What the CUDA benches share: the seed's shapes (B=8, S=1024, D=2048, H=16, F=8192, V=32000, so
// T=B·S=8192 tokens) and device tensors that live as long as their holder. A bench has nothing
// to recover: any failure ends it with the status.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "worker/backend/backend.h"

namespace fsdpd {

constexpr int64_t kBatch = 8, kSeq = 1024, kDim = 2048, kHeads = 16, kHidden = 8192, kVocab = 32000;
constexpr int64_t kTokens = kBatch * kSeq;

inline void ExitOnError(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
    std::exit(1);
  }
}

class DeviceTensors {
 public:
  explicit DeviceTensors(Backend* backend) : backend_(backend) {}

  // A new tensor filled with `fill` on the compute stream (token ids are left unfilled).
  Tensor New(DType dtype, std::vector<int64_t> shape, float fill = 0.01f) {
    Tensor tensor{nullptr, dtype, std::move(shape)};
    auto buffer = backend_->Allocate(tensor.bytes());
    ExitOnError(buffer.status(), "allocate");
    tensor.data = (*buffer)->data();
    buffers_.push_back(std::move(*buffer));
    if (dtype != DType::kI32) {
      ExitOnError(backend_->ops().Fill(tensor, fill, backend_->compute_stream()), "fill");
    }
    return tensor;
  }

  // Frees every tensor into the backend's allocator.
  void Clear() { buffers_.clear(); }

 private:
  Backend* backend_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

}  // namespace fsdpd
