// MatmulTuner: the fastest candidate per shape (its fastest timed run), timed once per shape,
// errors passed on.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "edge/matmul_tuner.h"

namespace fsdpd::edge {
namespace {

TEST(MatmulTunerTest, KeepsTheFastestCandidatePerShapeAndTimesEachShapeOnce) {
  MatmulTuner tuner(3);
  std::vector<int> calls;
  // Candidate 1 is fastest on the first shape, candidate 2 on the second; the warm-up run of
  // each is slow, so a tuner that kept the first timing would pick wrongly.
  std::vector<double> first = {3.0, 1.0, 2.0}, second = {3.0, 2.0, 1.0};
  const std::vector<double>* seconds = &first;
  int runs = 0;
  auto time = [&](int i) -> absl::StatusOr<double> {
    calls.push_back(i);
    return ++runs % 4 == 1 ? 100.0 : (*seconds)[static_cast<size_t>(i)];
  };
  const MatmulShape a{8192, 2048, 8192, false}, b{8192, 8192, 2048, false};
  EXPECT_EQ(*tuner.Choose(a, time), 1);
  EXPECT_EQ(calls, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
  seconds = &second;
  EXPECT_EQ(*tuner.Choose(b, time), 2);
  EXPECT_EQ(calls.size(), 24u);
  EXPECT_EQ(*tuner.Choose(a, time), 1);  // remembered: no new timing
  EXPECT_EQ(calls.size(), 24u);
  EXPECT_EQ(tuner.Describe({"x", "y", "z"}),
            (std::vector<std::string>{"8192x8192x2048: y", "8192x2048x8192: z"}));
  ASSERT_EQ(tuner.chosen().size(), 2u);
  EXPECT_EQ(tuner.chosen().at(a), 1);
  EXPECT_EQ(tuner.chosen().at(b), 2);
}

TEST(MatmulTunerTest, BiasMakesAnotherShapeAndOneCandidateNeedsNoTiming) {
  MatmulTuner single(1);
  auto never = [](int) -> absl::StatusOr<double> {
    ADD_FAILURE() << "a single candidate was timed";
    return 0.0;
  };
  EXPECT_EQ(*single.Choose({4, 4, 4, false}, never), 0);
  MatmulTuner two(2);
  int runs = 0;
  auto time = [&](int i) -> absl::StatusOr<double> {
    ++runs;
    return i == 0 ? 1.0 : 2.0;
  };
  EXPECT_EQ(*two.Choose({4, 4, 4, false}, time), 0);
  EXPECT_EQ(*two.Choose({4, 4, 4, true}, time), 0);
  EXPECT_EQ(runs, 16);
}

TEST(MatmulTunerTest, OneSlowRunDoesNotDisqualifyTheFasterCandidate) {
  // Candidate 0 runs 1.0 s but one of its timed runs is slowed to 5.0 s (another tenant on the
  // GPU); candidate 1 runs a steady 2.0 s. A tuner that averaged, or kept one run, would pick 1.
  MatmulTuner tuner(2);
  std::vector<double> zero = {9.0, 1.0, 5.0, 1.0};  // the warm-up first
  size_t zero_run = 0;
  auto time = [&](int i) -> absl::StatusOr<double> { return i == 0 ? zero[zero_run++] : 2.0; };
  EXPECT_EQ(*tuner.Choose({64, 64, 64, false}, time), 0);
  EXPECT_EQ(zero_run, 4u);
}

TEST(MatmulTunerTest, ACandidateTimedAsInfinityIsNeverChosen) {
  // How the attention tuner leaves out a shader that cannot take the shape's head_dim.
  MatmulTuner tuner(3);
  auto time = [](int i) -> absl::StatusOr<double> {
    return i == 1 ? std::numeric_limits<double>::infinity() : 2.0 - i * 0.5;
  };
  EXPECT_EQ(*tuner.Choose({8, 8, 8, false}, time), 2);
  auto only_first = [](int i) -> absl::StatusOr<double> {
    return i == 0 ? 5.0 : std::numeric_limits<double>::infinity();
  };
  EXPECT_EQ(*tuner.Choose({16, 16, 16, true}, only_first), 0);
  // The first candidate unable to run the shape (a matmul reading fp32 x, given an fp16 x)
  // loses to any that can, however slow.
  auto only_last = [](int i) -> absl::StatusOr<double> {
    return i == 2 ? 1e6 : std::numeric_limits<double>::infinity();
  };
  EXPECT_EQ(*tuner.Choose({32, 32, 32, false}, only_last), 2);
}

TEST(MatmulTunerTest, AnFp16InputIsAnotherShape) {
  // A shape tuned with fp32 x is never reused for fp16 x: the candidates that can read it, and
  // what they cost (no cast in front), differ.
  MatmulTuner tuner(2);
  auto fp32_x = [](int i) -> absl::StatusOr<double> { return i == 0 ? 1.0 : 2.0; };
  auto fp16_x = [](int i) -> absl::StatusOr<double> {
    return i == 0 ? std::numeric_limits<double>::infinity() : 2.0;
  };
  const MatmulShape fp32{64, 128, 256, true}, fp16{64, 128, 256, true, true};
  EXPECT_EQ(*tuner.Choose(fp32, fp32_x), 0);
  EXPECT_EQ(*tuner.Choose(fp16, fp16_x), 1);
  EXPECT_EQ(*tuner.Choose(fp32, fp16_x), 0);  // remembered
  EXPECT_EQ(
      tuner.Describe({"tiled", "tiled-h"}),
      (std::vector<std::string>{"64x256x128 +bias: tiled", "64x256x128 +bias fp16 x: tiled-h"}));
}

TEST(MatmulTunerTest, ATimingErrorIsReturnedAndNothingIsRemembered) {
  MatmulTuner tuner(2);
  bool fail = true;
  auto time = [&](int i) -> absl::StatusOr<double> {
    if (fail && i == 1) return absl::InternalError("device lost");
    return 1.0 + i;
  };
  absl::StatusOr<int> chosen = tuner.Choose({2, 2, 2, false}, time);
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.status().message(), "device lost");
  EXPECT_TRUE(tuner.Describe({"a", "b"}).empty());
  fail = false;
  EXPECT_EQ(*tuner.Choose({2, 2, 2, false}, time), 0);
}

}  // namespace
}  // namespace fsdpd::edge
