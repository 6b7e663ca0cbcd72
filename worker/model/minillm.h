// MiniLLM's forward and backward, one FSDP unit at a time, against the Backend interface.
// FSDP owns the parameters: it hands each call the unit's unsharded parameters (a flat view
// in the compute dtype, laid out by UnitLayout) and, in backward, the unit's unsharded
// gradient buffer: the root's is accumulated into (its parameters serve the embedding, the head
// and the final norm, at both ends of the step), a block's is written whole, every parameter
// once (so it needs no zeroing). The model owns the activations it saves for backward.
//
// One training step, as the FSDP runner drives it:
//   BeginStep(tokens, targets)
//   EmbedForward(root)                         root unit gathered first
//   BlockForward(i, block_i) for i = 0..L-1    each block gathered (prefetch i+1), then freed
//   HeadForwardBackward(root, root_grad)       fused head + cross-entropy + its backward
//   BlockBackward(i, block_i, grad_i) for i = L-1..0
//   EmbedBackward(root_grad)
//   loss = Loss()                              read back once the whole step is queued
// With config.activation_recompute, BlockBackward first recomputes what forward did not keep
// (ffn.0's output, or the block's whole forward) from the same inputs with the same kernels.
// The activation workspace is allocated once, by Create, for the chosen recompute.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/backend/backend.h"
#include "worker/model/model_config.h"

namespace fsdpd {

class MiniLLM {
 public:
  // Allocates the activation workspace for batch × seq tokens on the backend.
  static absl::StatusOr<std::unique_ptr<MiniLLM>> Create(const ModelConfig& config, int64_t batch,
                                                         int64_t seq, Backend* backend);
  virtual ~MiniLLM() = default;

  const ModelConfig& config() const { return config_; }
  const std::vector<UnitLayout>& units() const { return units_; }
  int root_unit() const { return static_cast<int>(units_.size()) - 1; }

  // tokens and targets: batch·seq int32 on the host.
  virtual absl::Status BeginStep(const int32_t* tokens, const int32_t* targets) = 0;
  virtual absl::Status EmbedForward(const Tensor& root_params) = 0;
  virtual absl::Status BlockForward(int layer, const Tensor& block_params) = 0;
  // Queues the mean loss (fp32, kept on the device until Loss()) and accumulates root gradients
  // (head, final norm) into root_grads, scaled by loss_scale (1/world_size folds FSDP's average
  // in when reduce-scatter sums; 1.0 when it averages). Nothing waits for the device here, so
  // backward is queued while the head still runs.
  virtual absl::Status HeadForwardBackward(const Tensor& root_params, const Tensor& root_grads,
                                           double loss_scale) = 0;
  // The mean loss of the last HeadForwardBackward, read back to the host: waits for the work
  // queued on the model's stream so far, so a step calls it once its work is queued.
  virtual absl::StatusOr<float> Loss() = 0;
  // Overwrites the gradient of every parameter of the block in block_grads (whatever was there
  // before); elements past the block's parameters (FSDP's padding) are left alone.
  virtual absl::Status BlockBackward(int layer, const Tensor& block_params,
                                     const Tensor& block_grads) = 0;
  virtual absl::Status EmbedBackward(const Tensor& root_grads) = 0;

  // Forward only, for tests and evaluation: logits [batch·seq, vocab] in fp32 on the host.
  virtual absl::Status Logits(const std::vector<Tensor>& unit_params,
                              std::vector<float>* logits) = 0;

 protected:
  MiniLLM(ModelConfig config) : config_(config), units_(BuildUnitLayouts(config)) {}
  ModelConfig config_;
  std::vector<UnitLayout> units_;
};

}  // namespace fsdpd
