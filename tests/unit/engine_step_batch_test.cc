// StepBatch reads the next step's batch on a reader thread: the batch a step gets must be the
// loader's batch for that step whichever way it was read, a read's error must reach the step,
// and one thread, started once, serves every step.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "worker/step_batch.h"

namespace fsdpd {
namespace {

// Batch i holds i·1000 + position; batch `failing` fails.
class CountingLoader : public DataLoader {
 public:
  explicit CountingLoader(int64_t tokens, int64_t failing = -1)
      : tokens_(tokens), failing_(failing) {}
  absl::Status Batch(int64_t step, int32_t* inputs, int32_t* targets) override {
    ++reads;
    {
      std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
    }
    if (step == failing_) return absl::DataLossError("batch unreadable");
    for (int64_t t = 0; t < tokens_; ++t) {
      inputs[t] = static_cast<int32_t>(step * 1000 + t);
      targets[t] = static_cast<int32_t>(step * 1000 + t + 1);
    }
    return absl::OkStatus();
  }
  int64_t num_tokens() const override { return -1; }
  std::atomic<int> reads{0};
  std::mutex mutex;
  std::set<std::thread::id> threads;  // every thread that read a batch

 private:
  int64_t tokens_;
  int64_t failing_;
};

void ExpectBatch(const StepBatch& batch, int64_t index) {
  for (size_t t = 0; t < batch.inputs.size(); ++t) {
    ASSERT_EQ(batch.inputs[t], index * 1000 + static_cast<int64_t>(t)) << "position " << t;
    ASSERT_EQ(batch.targets[t], index * 1000 + static_cast<int64_t>(t) + 1) << "position " << t;
  }
}

TEST(StepBatchTest, TheBatchReadAheadIsTheOneTakenAndIsReadOnce) {
  CountingLoader loader(16);
  StepBatch batch(16);
  ASSERT_TRUE(batch.Take(loader, 0).ok());
  ExpectBatch(batch, 0);
  for (int64_t index = 1; index < 5; ++index) {
    batch.ReadAhead(loader, index);
    ASSERT_TRUE(batch.Take(loader, index).ok());
    ExpectBatch(batch, index);
  }
  EXPECT_EQ(loader.reads.load(), 5);
  // The first batch on this thread, the four ahead on one reader thread.
  EXPECT_EQ(loader.threads.size(), 2u);
  EXPECT_EQ(loader.threads.count(std::this_thread::get_id()), 1u);
}

TEST(StepBatchTest, AnotherIndexThanTheOneAheadIsReadNow) {
  CountingLoader loader(8);
  StepBatch batch(8);
  batch.ReadAhead(loader, 3);
  ASSERT_TRUE(batch.Take(loader, 7).ok());  // a resumed run, say: not the batch read ahead
  ExpectBatch(batch, 7);
  EXPECT_EQ(loader.reads.load(), 2);
}

TEST(StepBatchTest, AFailedReadAheadFailsTheStepThatTakesIt) {
  CountingLoader loader(8, /*failing=*/2);
  StepBatch batch(8);
  batch.ReadAhead(loader, 2);
  const absl::Status taken = batch.Take(loader, 2);
  EXPECT_EQ(taken.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(taken.message(), "batch unreadable");
  // A failure of a batch nobody takes is never reported.
  batch.ReadAhead(loader, 2);
  ASSERT_TRUE(batch.Take(loader, 4).ok());
  ExpectBatch(batch, 4);
}

}  // namespace
}  // namespace fsdpd
