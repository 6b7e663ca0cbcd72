// The model's shape (MiniLLM or Llama) and the layout of its parameters in FSDP units.
// Units: blocks 0..layers-1 (one transformer block each), then the root unit (embedding, head,
// and the final norm when enabled). Within a unit, parameters follow PyTorch's state_dict
// order and names (Hugging Face's for llama: worker/model/llama_layout.h), each a contiguous
// view at a fixed offset of the unit's flat buffer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fsdpd/v1/spec.pb.h"

namespace fsdpd {

// What a block's backward recomputes instead of keeping from its forward (torch's activation
// checkpointing). Numerics do not change: recompute runs the same kernels on the same inputs.
enum class ActivationRecompute {
  kNone,   // keep what backward reads (the norms and SiLU are recomputed anyway)
  kFfn,    // also recompute ffn.0's output [T, ffn_hidden] (one GEMM) in backward
  kBlock,  // keep only each block's input; re-run its forward before its backward
};

// parallel.activation_recompute: none (or empty), ffn or block.
absl::StatusOr<ActivationRecompute> ParseActivationRecompute(const std::string& text);

// The products of the blocks' linear layers (parallel.matmul_dtype). kBackend: the backend's own
// (bf16 on CUDA, fp32 on CPU); kFp8: Ops::Fp8LinearForward/Fp8LinearBackward, whose CPU side
// emulates the CUDA one. The head stays with the backend's products either way.
enum class MatmulDtype { kBackend, kFp8 };

// parallel.matmul_dtype: bf16 (or empty) or fp8.
absl::StatusOr<MatmulDtype> ParseMatmulDtype(const std::string& text);

// model.arch: MiniLLM (docs/architecture.md) or Hugging Face's LlamaForCausalLM.
enum class ModelArch { kMiniLLM, kLlama };

struct ModelConfig {
  ModelArch arch = ModelArch::kMiniLLM;
  int64_t vocab = 32000;
  int64_t dim = 2048;
  int64_t layers = 12;
  int64_t heads = 16;
  int64_t kv_heads = 16;      // llama: grouped-query attention; MiniLLM reads heads instead
  int64_t ffn_hidden = 8192;  // MiniLLM: ffn_mult · dim; llama: SwiGLU's width (ffn_dim)
  bool causal = false;        // llama: always
  bool final_norm = false;    // llama: always
  double norm_eps = 1.1920928955078125e-07;  // fp32 machine epsilon, PyTorch's default
  double rope_theta = 10000.0;               // llama
  bool tie_embeddings = false;               // llama: the head is the embedding
  ActivationRecompute activation_recompute = ActivationRecompute::kNone;
  MatmulDtype matmul_dtype = MatmulDtype::kBackend;

  bool llama() const { return arch == ModelArch::kLlama; }
  int64_t head_dim() const { return dim / heads; }
  // The kv heads attention runs with: kv_heads for llama, heads for MiniLLM.
  int64_t attention_kv_heads() const { return llama() ? kv_heads : heads; }
  // The width of a row of packed qkv: (heads + 2·kv_heads)·head_dim.
  int64_t qkv_width() const { return (heads + 2 * attention_kv_heads()) * head_dim(); }
  // The FFN's first product's width: ffn_hidden, or gate and up (2·ffn_hidden) for SwiGLU.
  int64_t ffn_in_width() const { return llama() ? 2 * ffn_hidden : ffn_hidden; }
};

// The model section of a spec that was validated where it entered (ValidateModel, run by
// ValidateJobSpec): a plain copy, with ffn_hidden = ffn_mult · dim (llama: ffn_dim, 0 meaning
// ffn_mult · dim), kv_heads 0 as heads and norm_eps 0 as fp32's epsilon; llama is causal with
// a final norm. MiniLLM::Create still refuses a shape it cannot build.
ModelConfig ModelConfigFromSpec(const v1::ModelSpec& spec);

struct ParameterInfo {
  std::string name;  // PyTorch state_dict name, e.g. "layers.3.attn.in_proj_weight"
                     // (llama: "model.layers.3.self_attn.q_proj.weight")
  std::vector<int64_t> shape;
  int64_t offset = 0;  // elements from the start of the unit's flat buffer
  int64_t numel = 0;
};

struct UnitLayout {
  std::string name;  // "layers.3" (llama: "model.layers.3") or "root"
  std::vector<ParameterInfo> parameters;
  int64_t numel = 0;                                         // unpadded
  const ParameterInfo& Find(const std::string& name) const;  // aborts on a programming error
};

// blocks first (index = layer), the root unit last.
std::vector<UnitLayout> BuildUnitLayouts(const ModelConfig& config);

// PyTorch's default initialisation of one unit into `flat` (unit.numel fp32 values):
// Embedding N(0, 1); Linear weights U(±1/√fan_in); in_proj_weight Xavier-uniform;
// in_proj_bias and out_proj.bias zeros; RMSNorm weights ones. llama: Hugging Face's, N(0, 0.02)
// for every Linear and the embedding, ones for norms. Deterministic in (seed, unit index), and
// independent of the world size.
void InitializeUnit(const ModelConfig& config, const UnitLayout& unit, int unit_index,
                    uint64_t seed, float* flat);

}  // namespace fsdpd
