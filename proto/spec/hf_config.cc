#include "proto/spec/hf_config.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/spec/job_spec.h"

namespace fsdpd {
namespace {

// ModelConfigFromSpec's rule (worker/model/model_config.h): 0 is fp32's machine epsilon.
constexpr double kFloat32Epsilon = 1.1920928955078125e-07;

std::string Number(double value) { return absl::StrFormat("%.17g", value); }

}  // namespace

std::string LlamaHfConfigJson(const v1::JobSpec& spec) {
  const v1::ModelSpec& model = spec.model();
  const double eps = model.norm_eps() > 0.0 ? model.norm_eps() : kFloat32Epsilon;
  const std::string theta = Number(model.rope_theta());
  const char* tied = model.tie_embeddings() ? "true" : "false";
  return absl::StrCat(
      "{\n"
      "  \"architectures\": [\"LlamaForCausalLM\"],\n"
      "  \"model_type\": \"llama\",\n"
      "  \"vocab_size\": ",
      model.vocab(), ",\n", "  \"hidden_size\": ", model.dim(), ",\n",
      "  \"intermediate_size\": ", LlamaFfnDim(model), ",\n",
      "  \"num_hidden_layers\": ", model.layers(), ",\n",
      "  \"num_attention_heads\": ", model.heads(), ",\n",
      "  \"num_key_value_heads\": ", LlamaKvHeads(model), ",\n",
      "  \"head_dim\": ", model.dim() / model.heads(), ",\n",
      "  \"hidden_act\": \"silu\",\n"
      "  \"max_position_embeddings\": ",
      spec.data().seq_len(), ",\n", "  \"rms_norm_eps\": ", Number(eps), ",\n",
      "  \"rope_theta\": ", theta, ",\n",
      "  \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": ", theta, "},\n",
      "  \"tie_word_embeddings\": ", tied, ",\n",
      "  \"attention_bias\": false,\n"
      "  \"mlp_bias\": false,\n"
      "  \"attention_dropout\": 0.0,\n"
      "  \"initializer_range\": 0.02,\n"
      "  \"torch_dtype\": \"float32\",\n"
      "  \"use_cache\": true\n"
      "}\n");
}

}  // namespace fsdpd
