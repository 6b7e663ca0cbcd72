#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <limits>
#include <thread>

#include "server/rendezvous_store.h"

namespace fsdpd::server {
namespace {

using std::chrono::milliseconds;

struct Result {
  std::promise<absl::StatusOr<std::string>> promise;
  std::future<absl::StatusOr<std::string>> future = promise.get_future();
  RendezvousStore::GetCallback callback() {
    return [this](absl::StatusOr<std::string> value) { promise.set_value(std::move(value)); };
  }
};

struct ManyResult {
  using Reply = absl::StatusOr<std::vector<std::string>>;
  std::promise<Reply> promise;
  std::future<Reply> future = promise.get_future();
  RendezvousStore::ManyCallback callback() {
    return [this](Reply values) { promise.set_value(std::move(values)); };
  }
};

TEST(RendezvousTest, GetReturnsAValueThatIsAlreadySet) {
  RendezvousStore store({});
  store.OpenScope("job-000001", 1);
  ASSERT_TRUE(store.Set("job-000001", 1, "addr/0", "10.0.0.1:5000").ok());
  Result result;
  store.Get("job-000001", 1, "addr/0", milliseconds(1000), result.callback());
  ASSERT_EQ(result.future.wait_for(milliseconds(0)), std::future_status::ready);
  EXPECT_EQ(*result.future.get(), "10.0.0.1:5000");
}

TEST(RendezvousTest, GetWaitsForALaterSetWithoutBlockingTheCaller) {
  RendezvousStore store({});
  store.OpenScope("job-000001", 1);
  Result result;
  const auto before = std::chrono::steady_clock::now();
  store.Get("job-000001", 1, "nccl-id", milliseconds(5000), result.callback());
  EXPECT_LT(std::chrono::steady_clock::now() - before, milliseconds(500));
  EXPECT_EQ(result.future.wait_for(milliseconds(50)), std::future_status::timeout);
  EXPECT_EQ(store.WaiterCount("job-000001", 1), 1u);
  EXPECT_EQ(store.WaiterCount("job-000001", 2), 0u);
  std::thread setter([&] { ASSERT_TRUE(store.Set("job-000001", 1, "nccl-id", "bytes").ok()); });
  ASSERT_EQ(result.future.wait_for(milliseconds(2000)), std::future_status::ready);
  EXPECT_EQ(*result.future.get(), "bytes");
  setter.join();
  EXPECT_EQ(store.WaiterCount("job-000001", 1), 0u);
}

TEST(RendezvousTest, GetTimesOutWithDeadlineExceeded) {
  RendezvousStore store({});
  store.OpenScope("job-000001", 1);
  Result result;
  const auto before = std::chrono::steady_clock::now();
  store.Get("job-000001", 1, "never", milliseconds(100), result.callback());
  ASSERT_EQ(result.future.wait_for(milliseconds(3000)), std::future_status::ready);
  EXPECT_GE(std::chrono::steady_clock::now() - before, milliseconds(100));
  absl::StatusOr<std::string> value = result.future.get();
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded) << value.status();
}

TEST(RendezvousTest, AddIsAnAtomicCounterVisibleToGet) {
  RendezvousStore store({});
  store.OpenScope("job-000001", 2);
  constexpr int kThreads = 8;
  constexpr int kAdds = 100;
  std::vector<std::thread> threads;
  for (int thread = 0; thread < kThreads; ++thread) {
    threads.emplace_back([&] {
      for (int i = 0; i < kAdds; ++i) ASSERT_TRUE(store.Add("job-000001", 2, "count", 1).ok());
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(*store.Add("job-000001", 2, "count", 0), kThreads * kAdds);
  EXPECT_EQ(*store.Add("job-000001", 2, "count", -5), kThreads * kAdds - 5);
  Result result;
  store.Get("job-000001", 2, "count", milliseconds(100), result.callback());
  EXPECT_EQ(*result.future.get(), std::to_string(kThreads * kAdds - 5));
  ASSERT_TRUE(store.Set("job-000001", 2, "text", "abc").ok());
  EXPECT_EQ(store.Add("job-000001", 2, "text", 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RendezvousTest, AddRefusesToOverflowAndKeepsTheValue) {
  RendezvousStore store({});
  store.OpenScope("job-000001", 1);
  const int64_t max = std::numeric_limits<int64_t>::max();
  ASSERT_EQ(*store.Add("job-000001", 1, "count", max), max);
  absl::StatusOr<int64_t> wrapped = store.Add("job-000001", 1, "count", 1);
  EXPECT_EQ(wrapped.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*store.Add("job-000001", 1, "count", 0), max);
  ASSERT_EQ(*store.Add("job-000001", 1, "low", std::numeric_limits<int64_t>::min()),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(store.Add("job-000001", 1, "low", -1).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(RendezvousTest, ScopesAreIsolatedAndDroppedWithTheirAttempt) {
  RendezvousStore store({});
  store.OpenScope("job-000001", 1);
  store.OpenScope("job-000001", 2);
  ASSERT_TRUE(store.Set("job-000001", 1, "key", "old").ok());
  Result other_attempt;
  store.Get("job-000001", 2, "key", milliseconds(5000), other_attempt.callback());
  EXPECT_EQ(other_attempt.future.wait_for(milliseconds(50)), std::future_status::timeout);

  store.DropScope("job-000001", 2);
  ASSERT_EQ(other_attempt.future.wait_for(milliseconds(1000)), std::future_status::ready);
  EXPECT_EQ(other_attempt.future.get().status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store.Set("job-000001", 2, "key", "x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.ScopeCount(), 1u);
}

TEST(RendezvousTest, AScopeHoldsWhatItsRanksNeedAndARefusalNamesTheBound) {
  RendezvousConfig config;  // 8 keys per rank; values of 4096 bytes plus 256 per rank
  RendezvousStore store(config);
  store.OpenScope("job-000001", 1);
  // Values: 4096 + 2 * 256 bytes for two ranks, more for more.
  EXPECT_TRUE(store.Set("job-000001", 1, "gloo/0", std::string(4608, 'a'), 2).ok());
  absl::Status too_long = store.Set("job-000001", 1, "gloo/1", std::string(4609, 'a'), 2);
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("--rendezvous-value-bytes"), std::string::npos) << too_long;
  EXPECT_NE(too_long.message().find("4608"), std::string::npos) << too_long;
  EXPECT_TRUE(store.Set("job-000001", 1, "gloo/1", std::string(4609, 'a'), 3).ok());
  // All of it together: one value of the largest size per rank (here 3 * 4864 bytes).
  EXPECT_TRUE(store.Set("job-000001", 1, "big", std::string(4864, 'a'), 3).ok());
  absl::Status too_much = store.Set("job-000001", 1, "big2", std::string(4864, 'a'), 3);
  EXPECT_EQ(too_much.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_much.message().find("per rank"), std::string::npos) << too_much;
  // Overwriting a key counts its new size only.
  EXPECT_TRUE(store.Set("job-000001", 1, "gloo/1", "x", 3).ok());
  EXPECT_TRUE(store.Set("job-000001", 1, "big2", std::string(4864, 'a'), 3).ok());

  // Keys: 8 per rank.
  store.OpenScope("job-000001", 2);
  for (int key = 0; key < 16; ++key) {
    ASSERT_TRUE(store.Set("job-000001", 2, "k" + std::to_string(key), "v", 2).ok()) << key;
  }
  absl::Status too_many = store.Set("job-000001", 2, "k16", "v", 2);
  EXPECT_EQ(too_many.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_many.message().find("--rendezvous-keys-per-rank 8"), std::string::npos) << too_many;
  EXPECT_EQ(store.Add("job-000001", 2, "counter", 1, 2).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(store.Set("job-000001", 2, "k3", "replaced", 2).ok());  // no new key
  EXPECT_TRUE(store.Set("job-000001", 2, "k16", "v", 3).ok());        // a third rank's keys
  // Keys themselves are short.
  EXPECT_EQ(store.Set("job-000001", 2, std::string(257, 'k'), "v", 3).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RendezvousTest, GetManyReadsWholeValuesAndPartsInTheOrderAsked) {
  RendezvousStore store({});
  store.OpenScope("job-000001", 1);
  ASSERT_TRUE(store.Set("job-000001", 1, "mesh/0", "aaabbbccc").ok());
  ASSERT_TRUE(store.Set("job-000001", 1, "host/0", "node-a").ok());
  ManyResult result;
  store.GetMany("job-000001", 1, {{"mesh/0", 1, 3}, {"host/0"}, {"mesh/0", 2, 3}},
                milliseconds(1000), result.callback());
  ASSERT_EQ(result.future.wait_for(milliseconds(0)), std::future_status::ready);
  absl::StatusOr<std::vector<std::string>> values = result.future.get();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::string>{"bbb", "node-a", "ccc"}));
}

TEST(RendezvousTest, GetManyParksOnceAndAnswersWhenItsLastKeyIsSet) {
  RendezvousStore store({});
  store.OpenScope("job-000001", 1);
  ASSERT_TRUE(store.Set("job-000001", 1, "k0", "zero").ok());
  ManyResult result;
  store.GetMany("job-000001", 1, {{"k0"}, {"k1"}, {"k2"}, {"k1"}}, milliseconds(5000),
                result.callback());
  EXPECT_EQ(store.WaiterCount("job-000001", 1), 1u);
  ASSERT_TRUE(store.Set("job-000001", 1, "k2", "two").ok());
  EXPECT_EQ(result.future.wait_for(milliseconds(50)), std::future_status::timeout);
  ASSERT_TRUE(store.Set("job-000001", 1, "k1", "one").ok());
  ASSERT_EQ(result.future.wait_for(milliseconds(2000)), std::future_status::ready);
  absl::StatusOr<std::vector<std::string>> values = result.future.get();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::string>{"zero", "one", "two", "one"}));
  EXPECT_EQ(store.WaiterCount("job-000001", 1), 0u);
}

TEST(RendezvousTest, GetManyTimesOutNamingAKeyStillMissingAndHowManyMore) {
  RendezvousStore store({});
  store.OpenScope("job-000001", 1);
  ASSERT_TRUE(store.Set("job-000001", 1, "k0", "zero").ok());
  ManyResult result;
  store.GetMany("job-000001", 1, {{"k0"}, {"k1"}, {"k2"}}, milliseconds(100), result.callback());
  ASSERT_EQ(result.future.wait_for(milliseconds(3000)), std::future_status::ready);
  absl::StatusOr<std::vector<std::string>> values = result.future.get();
  EXPECT_EQ(values.status().code(), absl::StatusCode::kDeadlineExceeded) << values.status();
  EXPECT_NE(values.status().message().find("key \"k1\" of job-000001/1 (and 1 more)"),
            std::string::npos)
      << values.status();
}

TEST(RendezvousTest, GetManyRefusesWhatNoRankNeeds) {
  RendezvousStore store({});
  store.OpenScope("job-000001", 1);
  ASSERT_TRUE(store.Set("job-000001", 1, "list", "aaabbbccc").ok());
  auto code = [&](std::vector<RendezvousStore::KeyPart> keys, int ranks) {
    ManyResult result;
    store.GetMany("job-000001", 1, std::move(keys), milliseconds(100), result.callback(), ranks);
    EXPECT_EQ(result.future.wait_for(milliseconds(0)), std::future_status::ready);
    return result.future.get().status();
  };
  // More keys than the scope of its ranks can hold (8 a rank by default).
  std::vector<RendezvousStore::KeyPart> many(17, {"list"});
  absl::Status too_many = code(many, 2);
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("holds at most 16"), std::string::npos) << too_many;
  EXPECT_TRUE(code(many, 3).ok());
  // A part that does not exist, a key of no bytes.
  EXPECT_EQ(code({{"list", 3, 3}}, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"list", -1, 3}}, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"list", 0, -2}}, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{""}}, 1).code(), absl::StatusCode::kInvalidArgument);
  // A value that does not split into the parts asked.
  absl::Status uneven = code({{"list", 0, 4}}, 1);
  EXPECT_EQ(uneven.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(uneven.message().find("holds 9 bytes"), std::string::npos) << uneven;
  // A reply larger than a client takes by default.
  RendezvousConfig roomy;
  roomy.max_value_bytes = 1 << 20;
  RendezvousStore large(roomy);
  large.OpenScope("job-000001", 1);
  ASSERT_TRUE(large.Set("job-000001", 1, "big", std::string(1 << 20, 'b'), 8).ok());
  ManyResult result;
  large.GetMany("job-000001", 1, std::vector<RendezvousStore::KeyPart>(4, {"big"}),
                milliseconds(100), result.callback(), 8);
  absl::Status too_large = result.future.get().status();
  EXPECT_EQ(too_large.code(), absl::StatusCode::kResourceExhausted) << too_large;
  ManyResult part;
  large.GetMany("job-000001", 1, std::vector<RendezvousStore::KeyPart>(4, {"big", 0, 2}),
                milliseconds(100), part.callback(), 8);
  EXPECT_TRUE(part.future.get().ok());
}

TEST(RendezvousTest, DroppingTheScopeAbortsAParkedGetMany) {
  RendezvousStore store({});
  store.OpenScope("job-000001", 1);
  ManyResult result;
  store.GetMany("job-000001", 1, {{"k0"}, {"k1"}}, milliseconds(60000), result.callback());
  store.DropScope("job-000001", 1);
  ASSERT_EQ(result.future.wait_for(milliseconds(1000)), std::future_status::ready);
  EXPECT_EQ(result.future.get().status().code(), absl::StatusCode::kAborted);
}

TEST(RendezvousTest, ShutdownCompletesParkedGets) {
  RendezvousStore store({});
  store.OpenScope("job-000001", 1);
  Result result;
  store.Get("job-000001", 1, "key", milliseconds(60000), result.callback());
  store.Shutdown();
  ASSERT_EQ(result.future.wait_for(milliseconds(1000)), std::future_status::ready);
  EXPECT_EQ(result.future.get().status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace fsdpd::server
