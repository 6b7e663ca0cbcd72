#include "worker/model/parameter_names.h"

#include "absl/strings/str_cat.h"

namespace fsdpd {

std::string BlockUnitName(const ModelConfig& config, int64_t layer) {
  return absl::StrCat(config.llama() ? "model.layers." : "layers.", layer);
}

BlockParameterNames BlockNames(const ModelConfig& config, int64_t layer) {
  const std::string prefix = BlockUnitName(config, layer) + ".";
  if (config.llama()) {
    return {prefix + "input_layernorm.weight",
            prefix + "self_attn.q_proj.weight",
            "",
            prefix + "self_attn.o_proj.weight",
            "",
            prefix + "post_attention_layernorm.weight",
            prefix + "mlp.gate_proj.weight",
            prefix + "mlp.down_proj.weight"};
  }
  return {prefix + "norm1.weight",       prefix + "attn.in_proj_weight",
          prefix + "attn.in_proj_bias",  prefix + "attn.out_proj.weight",
          prefix + "attn.out_proj.bias", prefix + "norm2.weight",
          prefix + "ffn.0.weight",       prefix + "ffn.2.weight"};
}

RootParameterNames RootNames(const ModelConfig& config) {
  if (config.llama()) {
    return {"model.embed_tokens.weight",
            config.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight",
            "model.norm.weight"};
  }
  return {"embed.weight", "head.weight", "norm.weight"};
}

}  // namespace fsdpd
