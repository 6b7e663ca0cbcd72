// model_logits: the logits fsdpd's model computes for a batch, from an exported model. Reads an
// export (`fsdpctl export`'s safetensors: the tensors and, in __metadata__, the model config of
// formats/model_metadata.h, MiniLLM's or a Llama's) and a batch (a safetensors file with
// "inputs" [batch, seq] token ids), runs the model's forward on the CPU backend in fp32, and
// writes "logits" [batch·seq, vocab] to a safetensors file. bench/check_hf_export.py compares
// them with transformers' logits for the same folder.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "formats/model_metadata.h"
#include "formats/safetensors.h"
#include "worker/backend/cpu_backend.h"
#include "worker/model/minillm.h"

namespace fsdpd {
namespace {

absl::StatusOr<double> Number(const std::map<std::string, std::string>& metadata,
                              const std::string& key) {
  double value = 0;
  auto found = metadata.find(key);
  if (found == metadata.end() || !absl::SimpleAtod(found->second, &value)) {
    return absl::InvalidArgumentError(absl::StrCat("__metadata__ has no number '", key, "'"));
  }
  return value;
}

// The model config an export carries.
absl::StatusOr<ModelConfig> ConfigOf(const std::map<std::string, std::string>& metadata,
                                     const std::string& source) {
  ModelConfig config;
  auto architecture = metadata.find("architecture");
  if (architecture == metadata.end() || architecture->second != kLlamaArchitecture) {
    absl::StatusOr<ExportedModelConfig> minillm = ParseModelMetadata(metadata, source);
    if (!minillm.ok()) return minillm.status();
    config.vocab = minillm->vocab;
    config.dim = minillm->dim;
    config.layers = minillm->layers;
    config.heads = minillm->heads;
    config.kv_heads = minillm->heads;
    config.ffn_hidden = minillm->ffn_mult * minillm->dim;
    config.causal = minillm->causal;
    config.final_norm = minillm->final_norm;
    config.norm_eps = minillm->norm_eps;
    return config;
  }
  config.arch = ModelArch::kLlama;
  config.causal = true;
  config.final_norm = true;
  const std::pair<const char*, int64_t*> sizes[] = {
      {"vocab", &config.vocab}, {"dim", &config.dim},           {"layers", &config.layers},
      {"heads", &config.heads}, {"kv_heads", &config.kv_heads}, {"ffn_dim", &config.ffn_hidden}};
  for (const auto& [key, target] : sizes) {
    absl::StatusOr<double> value = Number(metadata, key);
    if (!value.ok()) return value.status();
    *target = static_cast<int64_t>(*value);
  }
  absl::StatusOr<double> theta = Number(metadata, "rope_theta");
  if (!theta.ok()) return theta.status();
  config.rope_theta = *theta;
  absl::StatusOr<double> eps = Number(metadata, "norm_eps");
  if (!eps.ok()) return eps.status();
  config.norm_eps = *eps;
  auto tied = metadata.find("tie_embeddings");
  config.tie_embeddings = tied != metadata.end() && tied->second == "true";
  return config;
}

int Run(const std::string& model_path, const std::string& batch_path,
        const std::string& output_path) {
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "model_logits: %s\n", message.c_str());
    return 1;
  };
  std::map<std::string, std::string> metadata;
  absl::StatusOr<std::vector<NamedTensor>> tensors = ReadSafetensors(model_path, &metadata);
  if (!tensors.ok()) return fail(std::string(tensors.status().message()));
  absl::StatusOr<ModelConfig> config = ConfigOf(metadata, model_path);
  if (!config.ok()) return fail(std::string(config.status().message()));
  absl::StatusOr<std::vector<NamedTensor>> batch = ReadSafetensors(batch_path);
  if (!batch.ok()) return fail(std::string(batch.status().message()));
  const NamedTensor* inputs = nullptr;
  for (const NamedTensor& tensor : *batch) {
    if (tensor.name == "inputs") inputs = &tensor;
  }
  if (inputs == nullptr || inputs->shape.size() != 2) {
    return fail(batch_path + " has no \"inputs\" of shape [batch, seq]");
  }
  std::vector<int32_t> tokens;
  for (float id : inputs->values) tokens.push_back(static_cast<int32_t>(id));

  CpuBackend backend;
  absl::StatusOr<std::unique_ptr<MiniLLM>> model =
      MiniLLM::Create(*config, inputs->shape[0], inputs->shape[1], &backend);
  if (!model.ok()) return fail(std::string(model.status().message()));
  std::map<std::string, const NamedTensor*> by_name;
  for (const NamedTensor& tensor : *tensors) by_name[tensor.name] = &tensor;
  std::vector<std::vector<float>> units;
  std::vector<Tensor> views;
  for (const UnitLayout& unit : (*model)->units()) {
    units.emplace_back(static_cast<size_t>(unit.numel));
    for (const ParameterInfo& info : unit.parameters) {
      auto found = by_name.find(info.name);
      if (found == by_name.end() || found->second->shape != info.shape) {
        return fail(model_path + ": no tensor " + info.name + " of the model's shape");
      }
      std::copy(found->second->values.begin(), found->second->values.end(),
                units.back().begin() + info.offset);
    }
    views.push_back(
        Tensor{units.back().data(), DType::kF32, {static_cast<int64_t>(units.back().size())}});
  }
  absl::Status begun = (*model)->BeginStep(tokens.data(), tokens.data());
  if (!begun.ok()) return fail(std::string(begun.message()));
  std::vector<float> logits;
  absl::Status computed = (*model)->Logits(views, &logits);
  if (!computed.ok()) return fail(std::string(computed.message()));
  NamedTensor out{"logits", {static_cast<int64_t>(tokens.size()), config->vocab}, logits};
  absl::Status written = WriteSafetensors(output_path, {out});
  if (!written.ok()) return fail(std::string(written.message()));
  std::printf("model_logits: %zu x %lld logits of %s written to %s\n", tokens.size(),
              static_cast<long long>(config->vocab), model_path.c_str(), output_path.c_str());
  return 0;
}

}  // namespace
}  // namespace fsdpd

int main(int argc, char** argv) {
  CLI::App app{"model_logits: an exported model's logits for a batch, on the CPU in fp32"};
  std::string model_path, batch_path, output_path;
  app.add_option("--model", model_path, "exported model (safetensors with its metadata)")
      ->required();
  app.add_option("--batch", batch_path, "safetensors with \"inputs\" [batch, seq]")->required();
  app.add_option("-o,--output", output_path, "where to write \"logits\"")->required();
  CLI11_PARSE(app, argc, argv);
  return fsdpd::Run(model_path, batch_path, output_path);
}
