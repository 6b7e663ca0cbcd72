// The worker's environment knobs: an accepted value is taken, unset means the default, and a
// mistyped one is an error that names what is accepted (never silently the default).
#include <cstdlib>

#include "base/env_choice.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/trainer_support.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

class EnvKnobsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* name :
         {"FSDPD_TEST_CHOICE", "FSDPD_OPTIMIZER_STREAM", "FSDPD_COMM_TIMEOUT_SECONDS",
          "FSDPD_PREFETCH_UNITS", "FSDPD_MASTER_LAYOUT", "FSDPD_OPTIMIZER_SMS"}) {
      unsetenv(name);
    }
  }
};

TEST_F(EnvKnobsTest, EnvChoiceTakesAnAcceptedNameAndRefusesAnyOther) {
  absl::StatusOr<std::string> unset = EnvChoice("FSDPD_TEST_CHOICE", {"compute", "comm"});
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_EQ(*unset, "");
  setenv("FSDPD_TEST_CHOICE", "", 1);
  EXPECT_EQ(EnvChoice("FSDPD_TEST_CHOICE", {"compute", "comm"}).value_or("?"), "");
  setenv("FSDPD_TEST_CHOICE", "comm", 1);
  EXPECT_EQ(EnvChoice("FSDPD_TEST_CHOICE", {"compute", "comm"}).value_or("?"), "comm");
  setenv("FSDPD_TEST_CHOICE", "Comm", 1);
  absl::StatusOr<std::string> typo = EnvChoice("FSDPD_TEST_CHOICE", {"compute", "comm"});
  ASSERT_FALSE(typo.ok());
  EXPECT_EQ(typo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(typo.status().message(),
              HasSubstr("FSDPD_TEST_CHOICE must be one of compute, comm (or unset), got 'Comm'"));
}

TEST_F(EnvKnobsTest, OptimizerStream) {
  EXPECT_EQ(OptimizerOnCommStream().value_or(true), false);
  setenv("FSDPD_OPTIMIZER_STREAM", "comm", 1);
  EXPECT_EQ(OptimizerOnCommStream().value_or(false), true);
  setenv("FSDPD_OPTIMIZER_STREAM", "compute", 1);
  EXPECT_EQ(OptimizerOnCommStream().value_or(true), false);
  setenv("FSDPD_OPTIMIZER_STREAM", "coms", 1);
  EXPECT_THAT(OptimizerOnCommStream().status().message(), HasSubstr("got 'coms'"));
}

TEST_F(EnvKnobsTest, EnvCountTakesANonNegativeIntegerAndRefusesAnythingElse) {
  EXPECT_EQ(EnvCount("FSDPD_TEST_CHOICE").value_or(-1), 0) << "unset";
  setenv("FSDPD_TEST_CHOICE", "", 1);
  EXPECT_EQ(EnvCount("FSDPD_TEST_CHOICE").value_or(-1), 0) << "empty";
  setenv("FSDPD_TEST_CHOICE", "16", 1);
  EXPECT_EQ(EnvCount("FSDPD_TEST_CHOICE").value_or(-1), 16);
  for (const char* bad : {"-1", "3.5", "many", "16 SMs"}) {
    setenv("FSDPD_TEST_CHOICE", bad, 1);
    absl::StatusOr<int64_t> count = EnvCount("FSDPD_TEST_CHOICE");
    ASSERT_FALSE(count.ok()) << bad;
    EXPECT_THAT(count.status().message(),
                HasSubstr(std::string("FSDPD_TEST_CHOICE must be a non-negative integer (or "
                                      "unset), got '") +
                          bad + "'"));
  }
}

// The optimizer's SMs are only worth capping beside backward's GEMMs, on the comm stream.
TEST_F(EnvKnobsTest, OptimizerSmsNeedTheCommStream) {
  setenv("FSDPD_OPTIMIZER_SMS", "16", 1);
  EXPECT_THAT(OptimizerOnCommStream().status().message(),
              HasSubstr("FSDPD_OPTIMIZER_SMS=16 needs FSDPD_OPTIMIZER_STREAM=comm"));
  setenv("FSDPD_OPTIMIZER_STREAM", "comm", 1);
  EXPECT_EQ(OptimizerOnCommStream().value_or(false), true);
  setenv("FSDPD_OPTIMIZER_SMS", "0", 1);
  setenv("FSDPD_OPTIMIZER_STREAM", "compute", 1);
  EXPECT_EQ(OptimizerOnCommStream().value_or(true), false) << "0 is off";
  setenv("FSDPD_OPTIMIZER_SMS", "sixteen", 1);
  EXPECT_THAT(OptimizerOnCommStream().status().message(), HasSubstr("got 'sixteen'"));
}

TEST_F(EnvKnobsTest, PrefetchUnits) {
  EXPECT_EQ(PrefetchUnits().value_or(0), 1);
  setenv("FSDPD_PREFETCH_UNITS", "2", 1);
  EXPECT_EQ(PrefetchUnits().value_or(0), 2);
  setenv("FSDPD_PREFETCH_UNITS", "4", 1);
  EXPECT_THAT(PrefetchUnits().status().message(),
              HasSubstr("FSDPD_PREFETCH_UNITS must be one of 1, 2, 3 (or unset), got '4'"));
}

TEST_F(EnvKnobsTest, MasterLayout) {
  EXPECT_EQ(SplitMaster().value_or(false), true) << "split by default";
  setenv("FSDPD_MASTER_LAYOUT", "fp32", 1);
  EXPECT_EQ(SplitMaster().value_or(true), false);
  setenv("FSDPD_MASTER_LAYOUT", "split", 1);
  EXPECT_EQ(SplitMaster().value_or(false), true);
  setenv("FSDPD_MASTER_LAYOUT", "bf16", 1);
  EXPECT_THAT(SplitMaster().status().message(),
              HasSubstr("FSDPD_MASTER_LAYOUT must be one of split, fp32 (or unset), got 'bf16'"));
}

TEST_F(EnvKnobsTest, CommunicatorTimeout) {
  EXPECT_EQ(CommunicatorTimeout().value_or(std::chrono::milliseconds(0)),
            std::chrono::milliseconds(60000));
  setenv("FSDPD_COMM_TIMEOUT_SECONDS", "2.5", 1);
  EXPECT_EQ(CommunicatorTimeout().value_or(std::chrono::milliseconds(0)),
            std::chrono::milliseconds(2500));
  for (const char* bad : {"0", "-3", "ten", "nan"}) {
    setenv("FSDPD_COMM_TIMEOUT_SECONDS", bad, 1);
    absl::StatusOr<std::chrono::milliseconds> timeout = CommunicatorTimeout();
    ASSERT_FALSE(timeout.ok()) << bad;
    EXPECT_THAT(timeout.status().message(),
                HasSubstr("FSDPD_COMM_TIMEOUT_SECONDS must be a positive number of seconds"));
  }
}

}  // namespace
}  // namespace fsdpd
