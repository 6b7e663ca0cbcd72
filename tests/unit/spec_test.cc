#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proto/spec/job_spec.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

std::string Errors(const v1::JobSpec& spec) { return FormatFieldErrors(ValidateJobSpec(spec)); }

v1::JobSpec ParseOk(const std::string& yaml) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(yaml);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.value_or(v1::JobSpec());
}

TEST(JobSpec, DefaultsAreTheSeedWorkload) {
  v1::JobSpec spec = ParseOk("name: minillm-seed\n");
  EXPECT_EQ(spec.model().vocab(), 32000);
  EXPECT_EQ(spec.model().dim(), 2048);
  EXPECT_EQ(spec.model().layers(), 12);
  EXPECT_EQ(spec.model().heads(), 16);
  EXPECT_EQ(spec.data().seq_len(), 1024);
  EXPECT_EQ(spec.train().batch_size(), 8);
  EXPECT_DOUBLE_EQ(spec.train().lr(), 3e-4);
  EXPECT_DOUBLE_EQ(spec.train().beta2(), 0.999);
  EXPECT_EQ(spec.parallel().world_size(), 4);
  EXPECT_TRUE(spec.parallel().reshard_after_forward());
  EXPECT_EQ(spec.max_restarts(), 3);
  EXPECT_EQ(Errors(spec), "");
  // The seed's MiniLLM has 735,199,232 parameters, as the PyTorch anchor counts them
  // (bench/anchor/seed_train_fsdp.py's RESULT line: params=735199232).
  EXPECT_EQ(ParameterCount(spec.model()), 735199232);
}

TEST(JobSpec, ParsesEveryDesignField) {
  v1::JobSpec spec = ParseOk(R"(
name: demo
model: {vocab: 256, dim: 64, layers: 2, heads: 4, ffn_mult: 4, causal: true}
data: {source: text, path: /data/corpus.txt, seq_len: 64}
train: {batch_size: 4, steps: 50, lr: 1.0e-3, weight_decay: 0.0, betas: [0.8, 0.95], seed: 7}
parallel: {world_size: 2, device: cpu, param_dtype: fp32, reduce_dtype: fp32, reshard_after_forward: false}
checkpoint: {every_steps: 10, keep: 2, init_from: null}
profile: {start_step: 5, steps: 2, counters: false}
max_restarts: 1
priority: 5
)");
  EXPECT_EQ(spec.model().dim(), 64);
  EXPECT_TRUE(spec.model().causal());
  EXPECT_EQ(spec.data().path(), "/data/corpus.txt");
  EXPECT_DOUBLE_EQ(spec.train().beta1(), 0.8);
  EXPECT_EQ(spec.train().seed(), 7u);
  EXPECT_FALSE(spec.parallel().reshard_after_forward());
  EXPECT_EQ(spec.checkpoint().init_from(), "");
  EXPECT_EQ(spec.priority(), 5);
  EXPECT_EQ(Errors(spec), "");
}

TEST(JobSpec, ParseErrorsNameTheField) {
  EXPECT_THAT(ParseJobSpecYaml("name: a\nmodel: {dim: abc}\n").status().message(),
              HasSubstr("model.dim: expected an integer, got 'abc'"));
  EXPECT_THAT(ParseJobSpecYaml("name: a\ntrain: {stepz: 3}\n").status().message(),
              HasSubstr("train.stepz: unknown field"));
  EXPECT_THAT(ParseJobSpecYaml("name: a\ntrain: {betas: [0.9]}\n").status().message(),
              HasSubstr("train.betas: expected a list of two numbers"));
  EXPECT_THAT(ParseJobSpecYaml("name: a\nmodel: 3\n").status().message(),
              HasSubstr("model: expected a mapping"));
  EXPECT_THAT(ParseJobSpecYaml("name: [a\n").status().message(), HasSubstr("not valid YAML"));
  EXPECT_THAT(ParseJobSpecYaml("- a\n- b\n").status().message(), HasSubstr("YAML mapping"));
}

TEST(JobSpec, RepeatedKeysAreRefusedByName) {
  absl::StatusOr<v1::JobSpec> top = ParseJobSpecYaml("name: a\nname: b\n");
  ASSERT_FALSE(top.ok());
  EXPECT_THAT(std::string(top.status().message()), HasSubstr("name: appears more than once"));
  absl::StatusOr<v1::JobSpec> nested = ParseJobSpecYaml("name: a\ntrain: {lr: 1.0e-3, lr: 5}\n");
  ASSERT_FALSE(nested.ok());
  EXPECT_THAT(std::string(nested.status().message()),
              HasSubstr("train.lr: appears more than once"));
  absl::StatusOr<v1::JobSpec> sections = ParseJobSpecYaml("name: a\ntrain: {}\ntrain: {}\n");
  EXPECT_FALSE(sections.ok());
}

TEST(JobSpec, IntegersOutOfRangeSaySoWithTheRange) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpecYaml("name: a\nparallel: {world_size: 99999999999}\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              HasSubstr("parallel.world_size: 99999999999 is out of range; it must be between "
                        "-2147483648 and 2147483647"));
  absl::StatusOr<v1::JobSpec> word = ParseJobSpecYaml("name: a\nparallel: {world_size: many}\n");
  ASSERT_FALSE(word.ok());
  EXPECT_THAT(std::string(word.status().message()), HasSubstr("expected an integer, got 'many'"));
}

TEST(JobSpec, ValidationNamesEachFieldAndWhy) {
  v1::JobSpec spec = DefaultJobSpec();
  EXPECT_EQ(Errors(spec), "name: is required");

  spec.set_name("bad name!");
  EXPECT_THAT(Errors(spec), HasSubstr("name: may hold only letters"));

  spec = DefaultJobSpec();
  spec.set_name("x");
  spec.mutable_model()->set_dim(100);
  spec.mutable_model()->set_heads(3);
  EXPECT_THAT(Errors(spec),
              HasSubstr("model.dim: must be divisible by model.heads (got 100 and 3)"));

  spec = DefaultJobSpec();
  spec.set_name("x");
  spec.mutable_train()->set_steps(0);
  spec.mutable_parallel()->set_world_size(0);
  spec.mutable_parallel()->set_device("tpu");
  std::string errors = Errors(spec);
  EXPECT_THAT(errors, HasSubstr("train.steps: must be between 1 and"));
  EXPECT_THAT(errors, HasSubstr("parallel.world_size: must be between 1 and"));
  EXPECT_THAT(errors, HasSubstr("parallel.device: must be cpu or cuda (got 'tpu')"));
}

TEST(JobSpec, DataRules) {
  v1::JobSpec spec = DefaultJobSpec();
  spec.set_name("x");
  spec.mutable_data()->set_source("tokens");
  EXPECT_THAT(Errors(spec), HasSubstr("data.path: is required when data.source is tokens"));
  spec.mutable_data()->set_path("/x.bin");
  spec.mutable_model()->set_vocab(100000);
  EXPECT_THAT(Errors(spec), HasSubstr("data.token_bytes: uint16 tokens cannot address"));
  spec.mutable_data()->set_token_bytes(4);
  EXPECT_EQ(Errors(spec), "");
  spec.mutable_data()->set_source("text");
  spec.mutable_model()->set_vocab(100);
  EXPECT_THAT(Errors(spec),
              HasSubstr("model.vocab: the byte-level text tokenizer needs vocab >= 256"));
}

TEST(JobSpec, NumbersMustBeFiniteAndInRange) {
  v1::JobSpec spec = ParseOk("name: x\ntrain: {lr: .nan, betas: [1.0, 0.5]}\n");
  std::string errors = Errors(spec);
  EXPECT_THAT(errors, HasSubstr("train.lr: must be a number in (0, 10]"));
  EXPECT_THAT(errors, HasSubstr("train.beta1: must be in [0, 1)"));
}

// head_dim 256 is accepted for cuda too (cuDNN's fused attention runs it; a worker without cuDNN
// fails the job permanently); above 256 neither device takes it.
TEST(JobSpec, HeadDimUpTo256OnBothDevices) {
  v1::JobSpec spec = DefaultJobSpec();
  spec.set_name("x");
  spec.mutable_model()->set_heads(8);  // head_dim 256
  EXPECT_EQ(Errors(spec), "");
  spec.mutable_model()->set_heads(4);  // head_dim 512
  EXPECT_THAT(Errors(spec), HasSubstr("head_dim = dim / heads must be at most 256"));
  spec.mutable_parallel()->set_device("cpu");
  EXPECT_THAT(Errors(spec), HasSubstr("head_dim = dim / heads must be at most 256"));
}

TEST(JobSpec, SizeEstimatesGrowWithTheModelAndShrinkWithShards) {
  v1::JobSpec spec = DefaultJobSpec();
  double four_ranks = EstimateRankDeviceBytes(spec);
  spec.mutable_parallel()->set_world_size(1);
  double one_rank = EstimateRankDeviceBytes(spec);
  EXPECT_GT(one_rank, four_ranks);
  // 735M parameters × 12 bytes of fp32 master and AdamW state on one rank is at least 8.8 GB
  // (the gradient shard exists only per unit: the optimizer runs in backward).
  EXPECT_GT(one_rank, 12.0 * 735199232);
  // 669.5M weights of matrix products: 12 blocks of 4·d² + 2·d·4d, and the head (v·d); the
  // embedding (a lookup), norms and biases are not products.
  EXPECT_DOUBLE_EQ(FlopsPerToken(spec),
                   6.0 * (12.0 * (4 * 2048.0 * 2048 + 2 * 2048.0 * 8192) + 32000.0 * 2048) +
                       12.0 * 12 * 1024 * 2048);
}

TEST(JobSpec, ActivationRecomputeIsParsedCheckedAndShrinksTheEstimate) {
  v1::JobSpec spec = ParseOk("name: r\n");
  EXPECT_EQ(spec.parallel().activation_recompute(), "none");
  spec = ParseOk("name: r\nparallel: {world_size: 1, activation_recompute: ffn}\n");
  EXPECT_EQ(spec.parallel().activation_recompute(), "ffn");
  EXPECT_EQ(Errors(spec), "");
  EXPECT_EQ(ParseOk(JobSpecToYaml(spec)).parallel().activation_recompute(), "ffn");
  spec.mutable_parallel()->set_activation_recompute("");  // a spec stored before the field
  EXPECT_EQ(Errors(spec), "");
  spec.mutable_parallel()->set_activation_recompute("all");
  EXPECT_THAT(Errors(spec),
              HasSubstr("parallel.activation_recompute: must be none, ffn or block (got 'all')"));

  // The seed on one rank: ffn drops 12 blocks' [8192, 8192] bf16 ffn.0 outputs (1.61 GB).
  spec = ParseOk("name: r\nparallel: {world_size: 1}\n");
  const double none = EstimateRankDeviceBytes(spec);
  spec.mutable_parallel()->set_activation_recompute("ffn");
  const double ffn = EstimateRankDeviceBytes(spec);
  spec.mutable_parallel()->set_activation_recompute("block");
  const double block = EstimateRankDeviceBytes(spec);
  EXPECT_DOUBLE_EQ(none - ffn, 12.0 * 8192 * 8192 * 2);
  EXPECT_GT(ffn - block, 2e9);
  EXPECT_GT(block, 12.0 * 735199232);  // master and AdamW state stay
}

TEST(JobSpec, MatmulDtypeIsParsedCheckedAndCountedInTheEstimate) {
  v1::JobSpec spec = ParseOk("name: r\n");
  EXPECT_EQ(spec.parallel().matmul_dtype(), "bf16");
  spec = ParseOk("name: r\nparallel: {world_size: 1, matmul_dtype: fp8}\n");
  EXPECT_EQ(spec.parallel().matmul_dtype(), "fp8");
  EXPECT_EQ(Errors(spec), "");
  EXPECT_EQ(ParseOk(JobSpecToYaml(spec)).parallel().matmul_dtype(), "fp8");
  const double fp8 = EstimateRankDeviceBytes(spec);
  spec.mutable_parallel()->set_matmul_dtype("");  // a spec stored before the field
  EXPECT_EQ(Errors(spec), "");
  // The seed: ffn.0's backward holds dout and its transpose [8192, 8192], x [8192, 2048] and
  // the weight [8192, 2048] in fp8.
  EXPECT_DOUBLE_EQ(fp8 - EstimateRankDeviceBytes(spec),
                   2.0 * 8192 * 8192 + 8192.0 * 2048 + 8192.0 * 2048);
  spec.mutable_parallel()->set_matmul_dtype("int4");
  EXPECT_THAT(Errors(spec), HasSubstr("parallel.matmul_dtype: must be bf16 or fp8 (got 'int4')"));
}

TEST(JobSpec, OnlyFp8OnCudaNeedsANewerGpu) {
  v1::JobSpec spec = ParseOk("name: r\nparallel: {device: cuda, matmul_dtype: fp8}\n");
  EXPECT_EQ(MinComputeCapability(spec), 89);
  spec.mutable_parallel()->set_matmul_dtype("bf16");
  EXPECT_EQ(MinComputeCapability(spec), 0);
  // The CPU backend emulates the FP8 products: any CPU worker runs them.
  spec = ParseOk("name: r\nparallel: {device: cpu, matmul_dtype: fp8}\n");
  EXPECT_EQ(MinComputeCapability(spec), 0);
}

TEST(JobSpec, ClippingKeepsTheWholeGradientShardInTheEstimate) {
  v1::JobSpec spec = ParseOk("name: r\nparallel: {world_size: 2}\n");
  const double in_backward = EstimateRankDeviceBytes(spec);
  spec.mutable_train()->set_grad_clip(1.0);
  const double clipped = EstimateRankDeviceBytes(spec);
  // The whole fp32 gradient shard (4 bytes × 735M / 2) less the shards of the two largest units
  // in flight (the root: embedding and head, 2 × 32000 × 2048).
  EXPECT_DOUBLE_EQ(clipped - in_backward, 4.0 * 735199232 / 2 - 2 * 4.0 * (2 * 32000 * 2048) / 2);
}

TEST(JobSpec, YamlRoundTrip) {
  v1::JobSpec spec = ParseOk("name: rt\nmodel: {dim: 64, heads: 4}\ntrain: {betas: [0.5, 0.6]}\n");
  v1::JobSpec again = ParseOk(JobSpecToYaml(spec));
  EXPECT_EQ(again.model().dim(), 64);
  EXPECT_DOUBLE_EQ(again.train().beta1(), 0.5);
  EXPECT_EQ(again.name(), "rt");
}

}  // namespace
}  // namespace fsdpd

namespace fsdpd {
namespace {

// The coordinator fills in what a submit leaves unset and keeps what it sets, zeros included.
TEST(ApplyJobSpecDefaultsTest, FillsUnsetFieldsAndKeepsExplicitZeros) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(
      "name: d\nparallel: {reshard_after_forward: false}\nprofile: {steps: 0}\n"
      "train: {beta1: 0.5}\n",
      SpecDefaults::kLeaveUnset);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->has_model());
  EXPECT_FALSE(spec->train().has_eps());
  ApplyJobSpecDefaults(&*spec);
  const v1::JobSpec defaults = DefaultJobSpec();
  EXPECT_FALSE(spec->parallel().reshard_after_forward());
  EXPECT_TRUE(spec->profile().has_steps());
  EXPECT_EQ(spec->profile().steps(), 0);
  EXPECT_EQ(spec->train().beta1(), 0.5);
  EXPECT_EQ(spec->train().beta2(), defaults.train().beta2());
  EXPECT_EQ(spec->train().eps(), defaults.train().eps());
  EXPECT_EQ(spec->train().lr_schedule(), defaults.train().lr_schedule());
  EXPECT_EQ(spec->data().token_bytes(), defaults.data().token_bytes());
  EXPECT_EQ(spec->model().dim(), defaults.model().dim());
  EXPECT_EQ(spec->profile().start_step(), defaults.profile().start_step());
  EXPECT_TRUE(ValidateJobSpec(*spec).empty()) << FormatFieldErrors(ValidateJobSpec(*spec));
}

// The old YAML form of the betas still reads into the proto's fields.
TEST(ApplyJobSpecDefaultsTest, OldBetasListStillReads) {
  absl::StatusOr<v1::JobSpec> spec =
      ParseJobSpecYaml("name: b\ntrain: {betas: [0.7, 0.8]}\n", SpecDefaults::kLeaveUnset);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->train().beta1(), 0.7);
  EXPECT_EQ(spec->train().beta2(), 0.8);
}

}  // namespace
}  // namespace fsdpd
