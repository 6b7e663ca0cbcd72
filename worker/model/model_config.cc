#include "worker/model/model_config.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "base/splitmix64.h"
#include "spdlog/spdlog.h"
#include "worker/model/parameter_names.h"

namespace fsdpd {
namespace {

// Distributions written out rather than std::*_distribution, whose algorithms differ between
// standard libraries: the same seed must give the same model on every build.
class ParameterRandom {
 public:
  ParameterRandom(uint64_t seed, int unit_index)
      // SplitMix64 decorrelates nearby (seed, unit) pairs before they seed the engine.
      : engine_(SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(unit_index) + 1))) {}

  // Uniform in [0, 1) with 53 random bits.
  double Unit() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  float Uniform(double bound) { return static_cast<float>((2.0 * Unit() - 1.0) * bound); }

  // Standard normal by Box–Muller (1 − u keeps the logarithm finite).
  float Normal() {
    const double radius = std::sqrt(-2.0 * std::log(1.0 - Unit()));
    const double angle = 2.0 * M_PI * Unit();
    return static_cast<float>(radius * std::cos(angle));
  }

 private:
  std::mt19937_64 engine_;
};

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void AddParameter(UnitLayout* unit, std::string name, std::vector<int64_t> shape) {
  ParameterInfo info;
  info.name = std::move(name);
  info.shape = std::move(shape);
  info.numel = 1;
  for (int64_t d : info.shape) info.numel *= d;
  info.offset = unit->numel;
  unit->numel += info.numel;
  unit->parameters.push_back(std::move(info));
}

}  // namespace

absl::StatusOr<ActivationRecompute> ParseActivationRecompute(const std::string& text) {
  if (text.empty() || text == "none") return ActivationRecompute::kNone;
  if (text == "ffn") return ActivationRecompute::kFfn;
  if (text == "block") return ActivationRecompute::kBlock;
  return absl::InvalidArgumentError(
      absl::StrCat("parallel.activation_recompute: must be none, ffn or block (got '", text, "')"));
}

absl::StatusOr<MatmulDtype> ParseMatmulDtype(const std::string& text) {
  if (text.empty() || text == "bf16") return MatmulDtype::kBackend;
  if (text == "fp8") return MatmulDtype::kFp8;
  return absl::InvalidArgumentError(
      absl::StrCat("parallel.matmul_dtype: must be bf16 or fp8 (got '", text, "')"));
}

ModelConfig ModelConfigFromSpec(const v1::ModelSpec& spec) {
  ModelConfig config;
  config.vocab = spec.vocab();
  config.dim = spec.dim();
  config.layers = spec.layers();
  config.heads = spec.heads();
  config.kv_heads = spec.heads();
  config.ffn_hidden = spec.ffn_mult() * spec.dim();
  config.causal = spec.causal();
  config.final_norm = spec.final_norm();
  if (spec.norm_eps() > 0.0) config.norm_eps = spec.norm_eps();
  if (spec.arch() == "llama") {
    config.arch = ModelArch::kLlama;
    if (spec.kv_heads() > 0) config.kv_heads = spec.kv_heads();
    if (spec.ffn_dim() > 0) config.ffn_hidden = spec.ffn_dim();
    config.causal = true;
    config.final_norm = true;
    config.rope_theta = spec.rope_theta();
    config.tie_embeddings = spec.tie_embeddings();
  }
  return config;
}

const ParameterInfo& UnitLayout::Find(const std::string& parameter_name) const {
  for (const ParameterInfo& info : parameters) {
    if (info.name == parameter_name) return info;
  }
  spdlog::critical("unit {} has no parameter named {}", name, parameter_name);
  std::abort();
}

namespace {

// Hugging Face's LlamaForCausalLM state_dict, q_proj, k_proj, v_proj adjacent (one packed qkv
// matrix) and gate_proj, up_proj adjacent (one SwiGLU input matrix).
std::vector<UnitLayout> BuildLlamaUnitLayouts(const ModelConfig& config) {
  const int64_t dim = config.dim;
  const int64_t kv_dim = config.kv_heads * config.head_dim();
  std::vector<UnitLayout> units;
  units.reserve(static_cast<size_t>(config.layers) + 1);
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    UnitLayout unit;
    unit.name = BlockUnitName(config, layer);
    const std::string prefix = unit.name + ".";
    AddParameter(&unit, prefix + "input_layernorm.weight", {dim});
    AddParameter(&unit, prefix + "self_attn.q_proj.weight",
                 {config.heads * config.head_dim(), dim});
    AddParameter(&unit, prefix + "self_attn.k_proj.weight", {kv_dim, dim});
    AddParameter(&unit, prefix + "self_attn.v_proj.weight", {kv_dim, dim});
    AddParameter(&unit, prefix + "self_attn.o_proj.weight",
                 {dim, config.heads * config.head_dim()});
    AddParameter(&unit, prefix + "post_attention_layernorm.weight", {dim});
    AddParameter(&unit, prefix + "mlp.gate_proj.weight", {config.ffn_hidden, dim});
    AddParameter(&unit, prefix + "mlp.up_proj.weight", {config.ffn_hidden, dim});
    AddParameter(&unit, prefix + "mlp.down_proj.weight", {dim, config.ffn_hidden});
    units.push_back(std::move(unit));
  }
  UnitLayout root;
  root.name = "root";
  const RootParameterNames names = RootNames(config);
  AddParameter(&root, names.embedding, {config.vocab, dim});
  AddParameter(&root, names.norm, {dim});
  if (!config.tie_embeddings) AddParameter(&root, names.head, {config.vocab, dim});
  units.push_back(std::move(root));
  return units;
}

// Hugging Face's _init_weights for LlamaForCausalLM: N(0, initializer_range = 0.02) for every
// Linear and the embedding, ones for the RMSNorm weights.
void InitializeLlamaUnit(const UnitLayout& unit, ParameterRandom& random, float* flat) {
  constexpr float kInitializerRange = 0.02f;
  for (const ParameterInfo& info : unit.parameters) {
    float* values = flat + info.offset;
    const bool norm = EndsWith(info.name, "layernorm.weight") || info.name == "model.norm.weight";
    for (int64_t i = 0; i < info.numel; ++i) {
      values[i] = norm ? 1.0f : kInitializerRange * random.Normal();
    }
  }
}

}  // namespace

std::vector<UnitLayout> BuildUnitLayouts(const ModelConfig& config) {
  if (config.llama()) return BuildLlamaUnitLayouts(config);
  const int64_t dim = config.dim;
  std::vector<UnitLayout> units;
  units.reserve(static_cast<size_t>(config.layers) + 1);
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    UnitLayout unit;
    unit.name = absl::StrCat("layers.", layer);
    const std::string prefix = unit.name + ".";
    AddParameter(&unit, prefix + "norm1.weight", {dim});
    AddParameter(&unit, prefix + "attn.in_proj_weight", {3 * dim, dim});
    AddParameter(&unit, prefix + "attn.in_proj_bias", {3 * dim});
    AddParameter(&unit, prefix + "attn.out_proj.weight", {dim, dim});
    AddParameter(&unit, prefix + "attn.out_proj.bias", {dim});
    AddParameter(&unit, prefix + "norm2.weight", {dim});
    AddParameter(&unit, prefix + "ffn.0.weight", {config.ffn_hidden, dim});
    AddParameter(&unit, prefix + "ffn.2.weight", {dim, config.ffn_hidden});
    units.push_back(std::move(unit));
  }
  UnitLayout root;
  root.name = "root";
  AddParameter(&root, "embed.weight", {config.vocab, dim});
  AddParameter(&root, "head.weight", {config.vocab, dim});
  if (config.final_norm) AddParameter(&root, "norm.weight", {dim});
  units.push_back(std::move(root));
  return units;
}

void InitializeUnit(const ModelConfig& config, const UnitLayout& unit, int unit_index,
                    uint64_t seed, float* flat) {
  ParameterRandom random(seed, unit_index);
  if (config.llama()) {
    InitializeLlamaUnit(unit, random, flat);
    return;
  }
  for (const ParameterInfo& info : unit.parameters) {
    float* values = flat + info.offset;
    const std::string& name = info.name;
    if (EndsWith(name, "norm1.weight") || EndsWith(name, "norm2.weight") || name == "norm.weight") {
      for (int64_t i = 0; i < info.numel; ++i) values[i] = 1.0f;
    } else if (EndsWith(name, "in_proj_bias") || EndsWith(name, "out_proj.bias")) {
      for (int64_t i = 0; i < info.numel; ++i) values[i] = 0.0f;
    } else if (name == "embed.weight") {
      for (int64_t i = 0; i < info.numel; ++i) values[i] = random.Normal();
    } else if (EndsWith(name, "in_proj_weight")) {
      // nn.MultiheadAttention: xavier_uniform_ on the packed [3·dim, dim] matrix.
      const double bound = std::sqrt(6.0 / static_cast<double>(info.shape[0] + info.shape[1]));
      for (int64_t i = 0; i < info.numel; ++i) values[i] = random.Uniform(bound);
    } else {
      // nn.Linear's kaiming_uniform_(a=√5) is U(±1/√fan_in), fan_in the second dimension.
      const double bound = 1.0 / std::sqrt(static_cast<double>(info.shape[1]));
      for (int64_t i = 0; i < info.numel; ++i) values[i] = random.Uniform(bound);
    }
  }
}

}  // namespace fsdpd
