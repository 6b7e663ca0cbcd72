// The figures derived from a spec: parameter count, FLOPs per token and device bytes per rank.
#include <algorithm>
#include <string>

#include "proto/spec/job_spec.h"

namespace fsdpd {
namespace {

// The sizes the estimates read, for either architecture.
struct ModelSizes {
  int64_t block = 0;           // parameters of one block
  int64_t block_matrices = 0;  // of those, the weights of its matrix products
  int64_t root = 0;            // embedding, head (unless tied) and final norm
  int64_t ffn_kept = 0;        // a block's FFN activation per token before its nonlinearity
  int64_t tensors = 0;         // tensors an export holds
  double largest_unit = 0;     // parameters of the largest FSDP unit, as the estimate counts them
};

ModelSizes SizesOf(const v1::ModelSpec& model) {
  const int64_t d = model.dim();
  const int64_t v = model.vocab();
  ModelSizes sizes;
  if (model.arch() == "llama") {
    const int64_t f = LlamaFfnDim(model);
    const int64_t heads = std::max<int64_t>(model.heads(), 1);
    const int64_t kv_dim = LlamaKvHeads(model) * (d / heads);
    // Two norms, q and o (d² each), k and v (d·kv_dim each), gate, up and down (d·f each).
    sizes.block_matrices = 2 * d * d + 2 * d * kv_dim + 3 * d * f;
    sizes.block = 2 * d + sizes.block_matrices;
    sizes.root = v * d + d + (model.tie_embeddings() ? 0 : v * d);
    sizes.ffn_kept = 2 * f;
    sizes.tensors = 9 * model.layers() + (model.tie_embeddings() ? 2 : 3);
    sizes.largest_unit = static_cast<double>(std::max(sizes.block, sizes.root));
    return sizes;
  }
  const int64_t f = model.ffn_mult() * d;
  sizes.block_matrices = 4 * d * d + 2 * d * f;
  sizes.block = 2 * d + 3 * d * d + 3 * d + d * d + d + 2 * d * f;
  sizes.root = 2 * v * d + (model.final_norm() ? d : 0);
  sizes.ffn_kept = f;
  sizes.tensors = 8 * model.layers() + 2 + (model.final_norm() ? 1 : 0);
  // The matrices only: 4·d² + 2·d·f a block, 2·v·d the root.
  sizes.largest_unit = std::max(4.0 * d * d + 2.0 * d * f, 2.0 * v * d);
  return sizes;
}

}  // namespace

int64_t LlamaKvHeads(const v1::ModelSpec& model) {
  return model.kv_heads() > 0 ? model.kv_heads() : model.heads();
}

int64_t LlamaFfnDim(const v1::ModelSpec& model) {
  return model.ffn_dim() > 0 ? model.ffn_dim() : model.ffn_mult() * model.dim();
}

int64_t ParameterCount(const v1::ModelSpec& model) {
  const ModelSizes sizes = SizesOf(model);
  return model.layers() * sizes.block + sizes.root;
}

int64_t ExportedModelBytesLimit(const v1::ModelSpec& model) {
  return 8 + (64 << 10) + 256 * SizesOf(model).tensors + 4 * ParameterCount(model);
}

double FlopsPerToken(const v1::JobSpec& spec) {
  const v1::ModelSpec& model = spec.model();
  // 6·N over the weights of matrix products (the blocks' and the head's, once whether or not
  // it is tied), as MFU is counted for PaLM and Megatron: the embedding is a lookup, and norms
  // and biases add no products. Then 12·L·s·d for attention's two products.
  const double matrices = static_cast<double>(model.layers()) * SizesOf(model).block_matrices +
                          static_cast<double>(model.vocab()) * static_cast<double>(model.dim());
  return 6.0 * matrices + 12.0 * static_cast<double>(model.layers()) *
                              static_cast<double>(spec.data().seq_len()) *
                              static_cast<double>(model.dim());
}

double EstimateRankDeviceBytes(const v1::JobSpec& spec) {
  const v1::ModelSpec& model = spec.model();
  const ModelSizes sizes = SizesOf(model);
  const double world = std::max(1, spec.parallel().world_size());
  const double params = static_cast<double>(ParameterCount(model));
  const double d = model.dim(), f = static_cast<double>(sizes.ffn_kept);
  const double param_bytes = spec.parallel().param_dtype() == "bf16" ? 2 : 4;
  const double activation_bytes = spec.parallel().device() == "cuda" ? 2 : 4;
  // Unsharded params and grads of the largest unit, twice for prefetch.
  const double largest_unit = sizes.largest_unit;
  const double unsharded = 2 * largest_unit * (param_bytes + 4);
  // fp32 master and AdamW m and v, sharded. Without clipping the optimizer runs in backward and
  // only the gradient shards of the units in flight (two) exist; with it, the whole one does.
  const double gradient_shards =
      spec.train().grad_clip() > 0 ? 4.0 * params / world : 2 * 4.0 * largest_unit / world;
  const double sharded_state = 12.0 * params / world + gradient_shards;
  // Gradient accumulation keeps every unit's unsharded fp32 gradient between micro-batches.
  const double accumulators = spec.train().grad_accum_steps() > 1 ? 4.0 * params : 0.0;
  // Activations per token per block: residuals, norms, qkv, attention out, the FFN's hidden
  // activation ×2 (a generous count of what a block keeps and its backward's workspace).
  // Recompute keeps less: ffn drops the FFN's first output; block keeps only each block's
  // input, and one block's worth once.
  const double tokens = static_cast<double>(spec.train().batch_size()) * spec.data().seq_len();
  const double per_token_block = (4 * d + 3 * d + d + 2 * f) * activation_bytes;
  const std::string& recompute = spec.parallel().activation_recompute();
  double kept_per_token = model.layers() * per_token_block;
  if (recompute == "ffn") kept_per_token -= model.layers() * f * activation_bytes;
  if (recompute == "block")
    kept_per_token = model.layers() * d * activation_bytes + per_token_block;
  const double activations = tokens * (kept_per_token + 2 * d * 4);
  // fp8 products: the largest backward's fp8 copies (kernels/cuda/fp8_linear.h), ffn.0's: dout
  // and its transpose [T, f], x [T, d] and the weight [f, d], a byte each.
  const double fp8_scratch =
      spec.parallel().matmul_dtype() == "fp8" ? 2 * tokens * f + tokens * d + f * d : 0.0;
  return sharded_state + accumulators + unsharded + activations + fp8_scratch;
}

int MinComputeCapability(const v1::JobSpec& spec) {
  const bool fp8 = spec.parallel().matmul_dtype() == "fp8";
  return spec.parallel().device() == "cuda" && fp8 ? kFp8MinComputeCapability : 0;
}

}  // namespace fsdpd
