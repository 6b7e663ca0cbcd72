// The config.json of a model folder that Hugging Face's transformers loads as it is
// (LlamaForCausalLM.from_pretrained(folder)), from a llama job's spec: fsdpctl export writes it
// beside model.safetensors, whose tensors already carry Hugging Face's names.
#pragma once

#include <string>

#include "fsdpd/v1/spec.pb.h"

namespace fsdpd {

// LlamaConfig's fields for spec.model() (arch llama, validated), as JSON text:
// max_position_embeddings is the job's data.seq_len, the dtype float32 (the export's), and the
// rotary base is written both as rope_theta (transformers 4) and rope_parameters (5).
std::string LlamaHfConfigJson(const v1::JobSpec& spec);

}  // namespace fsdpd
