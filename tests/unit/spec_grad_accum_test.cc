// train.grad_accum_steps in the spec: parsed from YAML, defaulted to 1 by the coordinator's
// defaults, kept through the YAML round trip, bounded once at submission, and counted in one
// rank's memory estimate (every unit's unsharded fp32 gradient kept between micro-batches).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "proto/spec/job_spec.h"
#include "proto/spec/spec_validate.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

std::string Errors(const v1::JobSpec& spec) { return FormatFieldErrors(ValidateJobSpec(spec)); }

TEST(GradAccumSpec, ParsedDefaultedAndKeptThroughYaml) {
  auto parsed =
      ParseJobSpecYaml("name: x\ntrain: {grad_accum_steps: 4}\n", SpecDefaults::kLeaveUnset);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->train().has_grad_accum_steps());
  EXPECT_EQ(parsed->train().grad_accum_steps(), 4);
  v1::JobSpec unset;
  unset.set_name("x");
  ApplyJobSpecDefaults(&unset);
  EXPECT_EQ(unset.train().grad_accum_steps(), 1);
  v1::JobSpec spec = *parsed;
  ApplyJobSpecDefaults(&spec);
  EXPECT_EQ(spec.train().grad_accum_steps(), 4) << "a set field keeps its value";
  auto again = ParseJobSpecYaml(JobSpecToYaml(spec), SpecDefaults::kLeaveUnset);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->train().grad_accum_steps(), 4);
  EXPECT_THAT(ParseJobSpecYaml("name: x\ntrain: {grad_accum_steps: two}\n").status().message(),
              HasSubstr("train.grad_accum_steps"));
}

TEST(GradAccumSpec, BoundedAtSubmissionByName) {
  v1::JobSpec spec = DefaultJobSpec();
  spec.set_name("x");
  for (int64_t bad : {int64_t{0}, int64_t{-3}, SpecLimits::kMaxGradAccumSteps + 1}) {
    spec.mutable_train()->set_grad_accum_steps(bad);
    EXPECT_THAT(Errors(spec), HasSubstr("train.grad_accum_steps: must be between 1 and 4096"))
        << bad;
  }
  spec.mutable_train()->set_grad_accum_steps(SpecLimits::kMaxGradAccumSteps);
  EXPECT_EQ(Errors(spec), "");
  spec.mutable_parallel()->set_device("cpu");
  spec.mutable_parallel()->set_param_dtype("fp32");
  spec.mutable_train()->set_batch_size(SpecLimits::kMaxBatch);
  spec.mutable_train()->set_grad_accum_steps(17);
  EXPECT_THAT(Errors(spec), HasSubstr("train.grad_accum_steps: batch_size × grad_accum_steps must "
                                      "be at most 1048576 sequences"));
}

TEST(GradAccumSpec, TheMemoryEstimateCountsTheAccumulators) {
  v1::JobSpec spec = DefaultJobSpec();
  const double one = EstimateRankDeviceBytes(spec);
  spec.mutable_train()->set_grad_accum_steps(8);
  EXPECT_DOUBLE_EQ(EstimateRankDeviceBytes(spec) - one, 4.0 * ParameterCount(spec.model()));
}

}  // namespace
}  // namespace fsdpd
