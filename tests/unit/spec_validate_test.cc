// The section validators (proto/spec/spec_validate.h): the rules a worker used to find only after
// scheduling (CUDA needs bf16 parameters, the CUDA attention's launch limits, the learning-rate
// schedule) and the syntax of path fields are all decided at submission.
#include "proto/spec/spec_validate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "proto/spec/job_spec.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Errors(const v1::JobSpec& spec) { return FormatFieldErrors(ValidateJobSpec(spec)); }

v1::JobSpec Seed() {
  v1::JobSpec spec = DefaultJobSpec();
  spec.set_name("x");
  return spec;
}

TEST(SpecValidate, TheSeedSpecIsValid) { EXPECT_EQ(Errors(Seed()), ""); }

TEST(SpecValidate, CudaNeedsBf16Parameters) {
  v1::JobSpec spec = Seed();
  spec.mutable_parallel()->set_param_dtype("fp32");
  EXPECT_THAT(Errors(spec), HasSubstr("parallel.param_dtype: the cuda engine computes with bf16"));
  spec.mutable_parallel()->set_device("cpu");
  EXPECT_EQ(Errors(spec), "");
}

TEST(SpecValidate, CudaBoundsBatchTimesHeads) {
  v1::JobSpec spec = Seed();
  spec.mutable_train()->set_batch_size(4097);  // · 16 heads = 65552
  EXPECT_THAT(Errors(spec), HasSubstr("train.batch_size: the cuda attention kernels support "
                                      "batch_size · model.heads up to 65535 (got 65552)"));
  spec.mutable_train()->set_batch_size(4095);
  EXPECT_THAT(Errors(spec), Not(HasSubstr("train.batch_size")));
}

// FP8 wants every dimension of the blocks' products a multiple of 16, on either device (the CPU
// emulates the CUDA products and takes their rule).
TEST(SpecValidate, Fp8NamesEachDimensionOffSixteen) {
  v1::JobSpec spec = Seed();
  spec.mutable_parallel()->set_matmul_dtype("fp8");
  EXPECT_EQ(Errors(spec), "");
  spec.mutable_model()->set_ffn_mult(3);
  spec.mutable_model()->set_dim(200);  // 8 heads of 25; qkv 600; FFN 600
  spec.mutable_model()->set_heads(8);
  spec.mutable_data()->set_seq_len(100);
  spec.mutable_train()->set_batch_size(2);  // 200 tokens
  const std::string errors = Errors(spec);
  EXPECT_THAT(errors, HasSubstr("parallel.matmul_dtype: fp8 needs every dimension of the linear "
                                "layers a multiple of 16: model.dim is 200"));
  EXPECT_THAT(errors, HasSubstr("qkv width (heads + 2·kv_heads)·head_dim is 600"));
  EXPECT_THAT(errors, HasSubstr("the FFN width is 600"));
  EXPECT_THAT(errors, HasSubstr("train.batch_size · data.seq_len is 200"));
  spec.mutable_parallel()->set_device("cpu");
  EXPECT_THAT(Errors(spec), HasSubstr("model.dim is 200"));
  spec.mutable_parallel()->set_matmul_dtype("bf16");
  EXPECT_THAT(Errors(spec), Not(HasSubstr("matmul_dtype")));

  // llama's widths come from kv_heads and ffn_dim.
  spec = Seed();
  spec.mutable_parallel()->set_matmul_dtype("fp8");
  spec.mutable_model()->set_arch("llama");
  spec.mutable_model()->set_kv_heads(4);
  spec.mutable_model()->set_ffn_dim(5000);
  EXPECT_THAT(Errors(spec), HasSubstr("parallel.matmul_dtype: fp8 needs every dimension of the "
                                      "linear layers a multiple of 16: the FFN width is 5000"));
  spec.mutable_model()->set_ffn_dim(5008);
  EXPECT_THAT(Errors(spec), Not(HasSubstr("matmul_dtype")));
}

TEST(SpecValidate, LearningRateScheduleIsCheckedAtSubmission) {
  v1::TrainSpec train = Seed().train();
  FieldErrors errors;
  train.set_lr_schedule("");
  ValidateTrain(train, errors);
  train.set_lr_schedule("cosine");
  train.set_warmup_steps(-1);
  ValidateTrain(train, errors);
  train.set_warmup_steps(0);
  train.set_min_lr_ratio(1.5);
  ValidateTrain(train, errors);
  const std::string text = FormatFieldErrors(errors.Take());
  EXPECT_THAT(text, HasSubstr("train.lr_schedule: must be constant or cosine (got '')"));
  EXPECT_THAT(text, HasSubstr("train.warmup_steps: must be between 0 and train.steps (got -1)"));
  EXPECT_THAT(text, HasSubstr("train.min_lr_ratio: must be in [0, 1]"));
}

TEST(SpecValidate, PathsMustBeAbsoluteNormalAndOutsideSystemFolders) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"data/tokens.bin", "must be an absolute path"},
      {"/data/../etc/passwd", "must be a normalised path: no empty, '.' or '..' components"},
      {"/data//tokens.bin", "must be a normalised path: no empty, '.' or '..' components"},
      {"/data/tokens.bin/", "must be a normalised path: no empty, '.' or '..' components"},
      {"/data/tok\nens.bin", "must not contain control characters"},
      {"/etc/passwd", "must not point into the system folder /etc"},
      {"/proc/self/environ", "must not point into the system folder /proc"},
      {"/dev", "must not point into the system folder /dev"},
      {"/" + std::string(SpecLimits::kMaxPathLength, 'a'), "must be at most 4096 characters"},
  };
  for (const auto& [path, message] : cases) {
    v1::JobSpec spec = Seed();
    spec.mutable_data()->set_source("tokens");
    spec.mutable_data()->set_path(path);
    spec.mutable_checkpoint()->set_init_from(path);
    const std::string errors = Errors(spec);
    EXPECT_THAT(errors, HasSubstr("data.path: " + message)) << path;
    EXPECT_THAT(errors, HasSubstr("checkpoint.init_from: " + message)) << path;
  }
  v1::JobSpec spec = Seed();
  spec.mutable_data()->set_source("tokens");
  spec.mutable_data()->set_path("/etcetera/tokens.bin");  // a prefix of a name is not the folder
  spec.mutable_checkpoint()->set_init_from("/srv/models/init.safetensors");
  EXPECT_EQ(Errors(spec), "");
}

TEST(SpecValidate, KeywordsAreBoundedAndNotEchoedWhole) {
  v1::JobSpec spec = Seed();
  spec.mutable_parallel()->set_device(std::string(1 << 20, 'x'));
  spec.mutable_train()->set_lr_schedule(std::string(100, 'y'));
  const std::string errors = Errors(spec);
  EXPECT_THAT(errors, HasSubstr("parallel.device: must be cpu or cuda"));
  EXPECT_THAT(errors, HasSubstr("train.lr_schedule: must be at most 64 characters (got 100)"));
  EXPECT_LT(errors.size(), 2000u);
}

// Every string field has a limit (README.md "The job spec"); one over it is named with the limit
// and its length, never echoed whole, by the same check fsdpctl runs before sending.
TEST(SpecValidate, EveryStringFieldIsLengthLimitedByName) {
  const std::string long_path = "/" + std::string(SpecLimits::kMaxPathLength, 'p');
  const std::string long_keyword(SpecLimits::kMaxKeywordLength + 1, 'k');
  v1::JobSpec spec = Seed();
  spec.set_name(std::string(SpecLimits::kMaxNameLength + 1, 'n'));
  spec.mutable_data()->set_source(long_keyword);
  spec.mutable_data()->set_path(long_path);
  spec.mutable_train()->set_lr_schedule(long_keyword);
  spec.mutable_parallel()->set_device(long_keyword);
  spec.mutable_parallel()->set_param_dtype(long_keyword);
  spec.mutable_parallel()->set_reduce_dtype(long_keyword);
  spec.mutable_parallel()->set_activation_recompute(long_keyword);
  spec.mutable_parallel()->set_matmul_dtype(long_keyword);
  spec.mutable_checkpoint()->set_init_from(long_path);

  FieldErrors lengths;
  ValidateStringLengths(spec, lengths);
  std::vector<std::string> fields;
  for (const FieldError& error : lengths.Take()) {
    fields.push_back(error.field);
    EXPECT_THAT(error.message, HasSubstr("must be at most")) << error.field;
  }
  EXPECT_THAT(fields,
              ::testing::UnorderedElementsAre(
                  "name", "data.source", "data.path", "train.lr_schedule", "parallel.device",
                  "parallel.param_dtype", "parallel.reduce_dtype", "parallel.activation_recompute",
                  "parallel.matmul_dtype", "checkpoint.init_from"));

  const std::string errors = Errors(spec);
  EXPECT_THAT(errors, HasSubstr("name: must be at most 128 characters (got 129)"));
  EXPECT_THAT(errors, Not(HasSubstr(long_path)));
  EXPECT_THAT(errors, Not(HasSubstr(spec.name())));
}

TEST(SpecValidate, StringsAtTheirLimitPassTheLengthCheck) {
  v1::JobSpec spec = Seed();
  spec.set_name(std::string(SpecLimits::kMaxNameLength, 'n'));
  spec.mutable_data()->set_path("/" + std::string(SpecLimits::kMaxPathLength - 1, 'p'));
  FieldErrors lengths;
  ValidateStringLengths(spec, lengths);
  EXPECT_TRUE(lengths.empty());
}

// The model's rules, which the worker no longer checks again when it builds the model
// (ModelConfigFromSpec): each names its field.
TEST(SpecValidate, ModelRulesNameTheirField) {
  const std::vector<std::pair<std::string, std::function<void(v1::ModelSpec&)>>> cases = {
      {"model.dim: must be divisible by model.heads (got 12 and 5)",
       [](v1::ModelSpec& model) { model.set_heads(5); }},
      {"model.vocab: must be between 2", [](v1::ModelSpec& model) { model.set_vocab(0); }},
      {"model.layers: must be between 1", [](v1::ModelSpec& model) { model.set_layers(0); }},
      {"model.ffn_mult: must be between 1 and 64",
       [](v1::ModelSpec& model) { model.set_ffn_mult(65); }},
      {"model.norm_eps: must be between 0", [](v1::ModelSpec& model) { model.set_norm_eps(-1); }},
      {"model.heads: head_dim = dim / heads must be at most 256 (got 512)",
       [](v1::ModelSpec& model) {
         model.set_dim(1024);
         model.set_heads(2);
       }},
  };
  for (const auto& [message, change] : cases) {
    v1::ModelSpec model;
    model.set_vocab(100);
    model.set_dim(12);
    model.set_layers(3);
    model.set_heads(4);
    model.set_ffn_mult(4);
    FieldErrors errors;
    ValidateModel(model, errors);
    EXPECT_TRUE(errors.empty()) << FormatFieldErrors(errors.Take());
    change(model);
    ValidateModel(model, errors);
    EXPECT_THAT(FormatFieldErrors(errors.Take()), HasSubstr(message));
  }
}

TEST(SpecValidate, EachSectionValidatorNamesOnlyItsFields) {
  v1::JobSpec spec = Seed();
  spec.mutable_model()->set_dim(30);
  spec.mutable_model()->set_heads(4);
  FieldErrors errors;
  ValidateModel(spec.model(), errors);
  const std::vector<FieldError> found = errors.Take();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].field, "model.dim");
}

}  // namespace
}  // namespace fsdpd
