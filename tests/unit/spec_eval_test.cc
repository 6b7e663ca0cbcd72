// The validation fields of the data section (data.eval_path, eval_every, eval_batches): parsed,
// defaulted (validation off, 8 batches), kept through YAML, checked once at submission by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "proto/spec/job_spec.h"
#include "proto/spec/spec_validate.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Errors(const v1::JobSpec& spec) { return FormatFieldErrors(ValidateJobSpec(spec)); }

TEST(EvalSpec, ParsedDefaultedAndKeptThroughYaml) {
  auto parsed = ParseJobSpecYaml(
      "name: x\ndata: {source: tokens, path: /d/train.bin, eval_path: /d/val.bin, eval_every: 50, "
      "eval_batches: 4}\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->data().eval_path(), "/d/val.bin");
  EXPECT_EQ(parsed->data().eval_every(), 50);
  EXPECT_EQ(parsed->data().eval_batches(), 4);
  auto again = ParseJobSpecYaml(JobSpecToYaml(*parsed));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->data().eval_path(), "/d/val.bin");
  EXPECT_EQ(again->data().eval_every(), 50);
  EXPECT_EQ(again->data().eval_batches(), 4);
  v1::JobSpec unset;
  ApplyJobSpecDefaults(&unset);
  EXPECT_EQ(unset.data().eval_every(), 0) << "validation is off by default";
  EXPECT_EQ(unset.data().eval_batches(), 8);
  EXPECT_EQ(unset.data().eval_path(), "");
}

TEST(EvalSpec, CheckedAtSubmissionByName) {
  v1::JobSpec spec = DefaultJobSpec();
  spec.set_name("x");
  spec.mutable_data()->set_eval_every(10);
  EXPECT_THAT(Errors(spec), HasSubstr("data.eval_path: is required when data.eval_every is set"));
  spec.mutable_data()->set_eval_path("/data/val.bin");
  EXPECT_THAT(Errors(spec), HasSubstr("data.eval_path: is read like data.path, so it needs "
                                      "data.source tokens or text (got synthetic)"));
  spec.mutable_data()->set_source("tokens");
  spec.mutable_data()->set_path("/data/train.bin");
  EXPECT_EQ(Errors(spec), "");
  spec.mutable_data()->set_eval_path("val.bin");
  EXPECT_THAT(Errors(spec), HasSubstr("data.eval_path: must be an absolute path"));
  spec.mutable_data()->set_eval_path("/data/val.bin");
  spec.mutable_data()->set_eval_every(-1);
  spec.mutable_data()->set_eval_batches(0);
  const std::string errors = Errors(spec);
  EXPECT_THAT(errors, HasSubstr("data.eval_every: must be between 0 and"));
  EXPECT_THAT(errors, HasSubstr("data.eval_batches: must be between 1 and 100000"));
  spec.mutable_data()->set_eval_every(0);
  spec.mutable_data()->set_eval_batches(8);
  spec.mutable_data()->set_eval_path("");
  EXPECT_THAT(Errors(spec), Not(HasSubstr("data.eval")));
}

}  // namespace
}  // namespace fsdpd
