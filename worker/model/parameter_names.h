// The names of a block's and the root's parameters for each architecture, as the units lay
// them out (BuildUnitLayouts): MiniLLM's PyTorch state_dict names, or Hugging Face's
// LlamaForCausalLM names. The model reads its parameters through these, so one block
// implementation serves both (worker/model/minillm_backend.h).
#pragma once

#include <string>

#include "worker/model/model_config.h"

namespace fsdpd {

struct BlockParameterNames {
  std::string attention_norm;
  // The packed qkv projection's weight [qkv_width, dim]: MiniLLM's in_proj_weight, or llama's
  // q_proj, whose k_proj and v_proj follow it in the unit, so the three read as one matrix.
  std::string qkv;
  std::string qkv_bias;  // empty: none (llama)
  std::string out;
  std::string out_bias;  // empty: none (llama)
  std::string ffn_norm;
  // The FFN's first weight [ffn_in_width, dim]: MiniLLM's ffn.0, or llama's gate_proj, whose
  // up_proj follows it, so SwiGLU's gate and up come from one product.
  std::string ffn_in;
  std::string ffn_out;  // [dim, ffn_hidden]: ffn.2 or down_proj
};

struct RootParameterNames {
  std::string embedding;
  std::string head;  // the embedding's name when tied
  std::string norm;  // the final norm's, when the model has one
};

BlockParameterNames BlockNames(const ModelConfig& config, int64_t layer);
RootParameterNames RootNames(const ModelConfig& config);

// The unit name of block `layer`: "layers.3", or "model.layers.3" for llama.
std::string BlockUnitName(const ModelConfig& config, int64_t layer);

}  // namespace fsdpd
