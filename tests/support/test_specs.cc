#include "tests/support/test_specs.h"

#include <cstdlib>
#include <fstream>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "proto/spec/job_spec.h"

namespace fsdpd::testing {

v1::JobSpec Validated(v1::JobSpec spec) {
  const std::vector<FieldError> errors = ValidateJobSpec(spec);
  EXPECT_TRUE(errors.empty()) << "invalid test spec " << spec.name() << ": "
                              << FormatFieldErrors(errors);
  return spec;
}

v1::JobSpec TinyJobSpec() {
  v1::JobSpec spec = DefaultJobSpec();
  spec.set_name("tiny");
  spec.mutable_model()->set_vocab(256);
  spec.mutable_model()->set_dim(64);
  spec.mutable_model()->set_layers(2);
  spec.mutable_model()->set_heads(4);
  spec.mutable_data()->set_seq_len(32);
  spec.mutable_train()->set_batch_size(2);
  spec.mutable_parallel()->set_world_size(1);
  spec.mutable_parallel()->set_device("cpu");
  spec.mutable_parallel()->set_param_dtype("fp32");
  return Validated(std::move(spec));
}

std::string GoldenTinyDir() {
  const char* source = std::getenv("FSDPD_SOURCE_DIR");
  return std::string(source != nullptr ? source : FSDPD_DEFAULT_SOURCE_DIR) + "/tests/golden/tiny";
}

nlohmann::json GoldenTinyConfig() {
  std::ifstream file(GoldenTinyDir() + "/config.json");
  nlohmann::json config = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  return config.is_object() ? config : nlohmann::json::object();
}

std::string GoldenLlamaDir(const std::string& fixture) {
  const char* source = std::getenv("FSDPD_SOURCE_DIR");
  return std::string(source != nullptr ? source : FSDPD_DEFAULT_SOURCE_DIR) + "/tests/golden/" +
         fixture;
}

nlohmann::json GoldenLlamaConfig(const std::string& fixture) {
  std::ifstream file(GoldenLlamaDir(fixture) + "/config.json");
  nlohmann::json config = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  return config.is_object() ? config : nlohmann::json::object();
}

v1::JobSpec GoldenLlamaSpec(const std::string& fixture, const std::string& device, int world,
                            int64_t steps, double lr) {
  const nlohmann::json config = GoldenLlamaConfig(fixture);
  // MiniLLM's golden job with the fixture's sizes (ffn_mult is MiniLLM's, unused by llama).
  nlohmann::json tiny = config;
  tiny["ffn_mult"] = 4;
  v1::JobSpec spec = GoldenTinySpec(tiny, device, world, steps, lr);
  spec.set_name("golden-" + fixture + "-" + device);
  const std::string golden = GoldenLlamaDir(fixture);
  v1::ModelSpec* model = spec.mutable_model();
  model->set_arch("llama");
  model->set_kv_heads(config.at("kv_heads"));
  model->set_ffn_dim(config.at("ffn_dim"));
  model->set_rope_theta(config.at("rope_theta"));
  model->set_norm_eps(config.at("norm_eps"));
  model->set_tie_embeddings(config.at("tie_embeddings"));
  spec.mutable_data()->set_path(golden + "/tokens.bin");
  spec.mutable_checkpoint()->set_init_from(golden + "/init.safetensors");
  return Validated(std::move(spec));
}

v1::JobSpec GoldenTinySpec(const nlohmann::json& config, const std::string& device, int world,
                           int64_t steps, double lr) {
  const std::string golden = GoldenTinyDir();
  v1::JobSpec spec = DefaultJobSpec();
  spec.set_name("golden-tiny-" + device);
  spec.mutable_model()->set_vocab(config.at("vocab"));
  spec.mutable_model()->set_dim(config.at("dim"));
  spec.mutable_model()->set_layers(config.at("layers"));
  spec.mutable_model()->set_heads(config.at("heads"));
  spec.mutable_model()->set_ffn_mult(config.at("ffn_mult"));
  spec.mutable_data()->set_source("tokens");
  spec.mutable_data()->set_path(golden + "/tokens.bin");
  spec.mutable_data()->set_token_bytes(2);
  spec.mutable_data()->set_seq_len(config.at("seq"));
  spec.mutable_train()->set_batch_size(config.at("batch"));
  spec.mutable_train()->set_steps(steps);
  spec.mutable_train()->set_lr(lr);
  spec.mutable_train()->set_weight_decay(config.at("weight_decay"));
  spec.mutable_train()->set_beta1(config.at("beta1"));
  spec.mutable_train()->set_beta2(config.at("beta2"));
  spec.mutable_train()->set_eps(config.at("eps"));
  spec.mutable_train()->set_lr_schedule("constant");
  spec.mutable_parallel()->set_world_size(world);
  spec.mutable_parallel()->set_device(device);
  spec.mutable_parallel()->set_param_dtype("bf16");
  spec.mutable_checkpoint()->set_every_steps(0);
  spec.mutable_checkpoint()->set_init_from(golden + "/init.safetensors");
  return Validated(std::move(spec));
}

}  // namespace fsdpd::testing
