// model.arch: llama in the job spec: its fields parse from YAML, take their defaults, are each
// validated once at submission with an error that names the field, and size the model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "proto/spec/job_spec.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

std::string Errors(const v1::JobSpec& spec) { return FormatFieldErrors(ValidateJobSpec(spec)); }

// The seed's size as a Llama (examples/llama.yaml).
v1::JobSpec SeedLlama() {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(R"(
name: llama-seed
model: {arch: llama, vocab: 32000, dim: 2048, layers: 12, heads: 16, kv_heads: 4,
        ffn_dim: 5632, rope_theta: 10000, norm_eps: 1.0e-5, tie_embeddings: false}
)");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

TEST(SpecLlama, TheSeedSizedLlamaParsesAndIsValid) {
  const v1::JobSpec spec = SeedLlama();
  EXPECT_EQ(spec.model().arch(), "llama");
  EXPECT_EQ(spec.model().kv_heads(), 4);
  EXPECT_EQ(spec.model().ffn_dim(), 5632);
  EXPECT_EQ(spec.model().rope_theta(), 10000);
  EXPECT_DOUBLE_EQ(spec.model().norm_eps(), 1e-5);
  EXPECT_FALSE(spec.model().tie_embeddings());
  EXPECT_EQ(Errors(spec), "");
}

TEST(SpecLlama, DefaultsAreMiniLlmAndTheLlamaFieldsNeutral) {
  const v1::JobSpec defaults = DefaultJobSpec();
  EXPECT_EQ(defaults.model().arch(), "minillm");
  EXPECT_EQ(defaults.model().kv_heads(), 0);
  EXPECT_EQ(defaults.model().rope_theta(), 10000);
  EXPECT_EQ(defaults.model().ffn_dim(), 0);
  EXPECT_FALSE(defaults.model().tie_embeddings());
  // Unset fields of a submitted llama spec take them: kv_heads 0 (as many as heads) and
  // ffn_dim 0 (ffn_mult · dim).
  v1::JobSpec spec;
  spec.set_name("x");
  spec.mutable_model()->set_arch("llama");
  ApplyJobSpecDefaults(&spec);
  EXPECT_EQ(Errors(spec), "");
  EXPECT_EQ(LlamaKvHeads(spec.model()), 16);
  EXPECT_EQ(LlamaFfnDim(spec.model()), 4 * 2048);
}

TEST(SpecLlama, ParameterCountIsHuggingFacesLlamaForCausalLm) {
  // Per block: two norms (2·2048), q and o (2·2048²), k and v (2·2048·512), gate, up and down
  // (3·2048·5632); the root: the embedding, the final norm and the head.
  const int64_t block = 2 * 2048 + 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 5632;
  v1::JobSpec spec = SeedLlama();
  EXPECT_EQ(ParameterCount(spec.model()), 12 * block + 2 * 32000 * 2048 + 2048);
  EXPECT_EQ(ParameterCount(spec.model()), 672188416);
  spec.mutable_model()->set_tie_embeddings(true);
  EXPECT_EQ(ParameterCount(spec.model()), 672188416 - 32000 * 2048);
  EXPECT_GT(ExportedModelBytesLimit(spec.model()), 4 * ParameterCount(spec.model()));
  // MFU counts the products alone: the blocks' matrices and the head, tied or not.
  const double matrices =
      12.0 * (2 * 2048.0 * 2048 + 2 * 2048.0 * 512 + 3 * 2048.0 * 5632) + 32000.0 * 2048;
  const double attention = 12.0 * 12 * spec.data().seq_len() * 2048;
  EXPECT_DOUBLE_EQ(FlopsPerToken(spec), 6 * matrices + attention);
  spec.mutable_model()->set_tie_embeddings(false);
  EXPECT_DOUBLE_EQ(FlopsPerToken(spec), 6 * matrices + attention);
}

TEST(SpecLlama, EachRuleNamesItsField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model: {arch: gpt}", "model.arch: must be minillm or llama (got 'gpt')"},
      {"model: {arch: llama, heads: 16, kv_heads: 5}",
       "model.kv_heads: model.heads must be divisible by model.kv_heads (got 16 and 5)"},
      {"model: {arch: llama, heads: 16, kv_heads: 32}",
       "model.kv_heads: model.heads must be divisible by model.kv_heads (got 16 and 32)"},
      {"model: {arch: llama, heads: 16, kv_heads: -1}", "model.kv_heads: must be between 0"},
      {"model: {arch: llama, dim: 48, heads: 16}",
       "model.heads: head_dim = dim / heads must be even for rotary positions (got 3)"},
      {"model: {arch: llama, rope_theta: 0}", "model.rope_theta: must be a number in (1, 1e12]"},
      {"model: {arch: llama, ffn_dim: -2}", "model.ffn_dim: must be between 0"},
      {"model: {kv_heads: 4}", "model.kv_heads: applies only to model.arch: llama"},
      {"model: {ffn_dim: 100}", "model.ffn_dim: applies only to model.arch: llama"},
      {"model: {rope_theta: 500000}", "model.rope_theta: applies only to model.arch: llama"},
      {"model: {tie_embeddings: true}", "model.tie_embeddings: applies only to model.arch: llama"},
  };
  for (const auto& [yaml, message] : cases) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml("name: x\n" + yaml);
    ASSERT_TRUE(spec.ok()) << yaml << ": " << spec.status();
    EXPECT_THAT(Errors(*spec), HasSubstr(message)) << yaml;
  }
  // An odd head_dim is MiniLLM's to have: rotary is llama's.
  absl::StatusOr<v1::JobSpec> odd = ParseJobSpecYaml("name: x\nmodel: {dim: 48, heads: 16}");
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(Errors(*odd), "");
}

TEST(SpecLlama, TheYamlRoundTripKeepsTheLlamaFields) {
  const v1::JobSpec spec = SeedLlama();
  absl::StatusOr<v1::JobSpec> again = ParseJobSpecYaml(JobSpecToYaml(spec));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->model().arch(), "llama");
  EXPECT_EQ(again->model().kv_heads(), 4);
  EXPECT_EQ(again->model().ffn_dim(), 5632);
  EXPECT_DOUBLE_EQ(again->model().norm_eps(), 1e-5);
  // MiniLLM's YAML is as it was: no llama keys.
  EXPECT_THAT(JobSpecToYaml(DefaultJobSpec()), ::testing::Not(HasSubstr("arch")));
}

TEST(SpecLlama, AWrongTypeNamesTheField) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml("name: x\nmodel: {kv_heads: many}");
  EXPECT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              HasSubstr("model.kv_heads: expected an integer, got 'many'"));
}

}  // namespace
}  // namespace fsdpd
