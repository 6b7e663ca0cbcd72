// What the ranks of an attempt really store in the coordinator's rendezvous scope fits its
// bounds: Gloo's full-mesh rendezvous, the CUDA runtime's device exchange and NCCL's unique id
// run against the real RendezvousStore with the default RendezvousConfig, sized by the attempt's
// ranks, for several world sizes. The sizes it measures are in docs/operations.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/rendezvous_store.h"
#include "worker/comm/communicator.h"
#include "worker/comm/host_staged_communicator.h"
#include "worker/comm/key_value_store.h"

namespace fsdpd {
namespace {

// One rank's view of the attempt's scope, as the coordinator's rendezvous service serves it.
class ScopeStore : public KeyValueStore {
 public:
  ScopeStore(server::RendezvousStore& store, int ranks) : store_(store), ranks_(ranks) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    return store_.Set("job-000001", 1, key, value, ranks_);
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override {
    auto promise = std::make_shared<std::promise<absl::StatusOr<std::string>>>();
    std::future<absl::StatusOr<std::string>> value = promise->get_future();
    store_.Get("job-000001", 1, key, timeout,
               [promise](absl::StatusOr<std::string> got) { promise->set_value(std::move(got)); });
    return value.get();
  }
  absl::StatusOr<std::vector<std::string>> GetMany(const std::vector<KeyPart>& keys,
                                                   std::chrono::milliseconds timeout) override {
    using Reply = absl::StatusOr<std::vector<std::string>>;
    auto promise = std::make_shared<std::promise<Reply>>();
    std::future<Reply> values = promise->get_future();
    store_.GetMany(
        "job-000001", 1, keys, timeout,
        [promise](Reply got) { promise->set_value(std::move(got)); }, ranks_);
    return values.get();
  }
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    return store_.Add("job-000001", 1, key, delta, ranks_);
  }

 private:
  server::RendezvousStore& store_;
  int ranks_;
};

class RendezvousFitTest : public ::testing::TestWithParam<int> {};

TEST_P(RendezvousFitTest, GlooTheDeviceExchangeAndNcclsIdFitTheDefaultBounds) {
  const int world = GetParam();
  server::RendezvousStore store({});
  store.OpenScope("job-000001", 1);
  std::vector<absl::Status> results(world);
  std::vector<std::unique_ptr<Communicator>> communicators(world);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      ScopeStore scope(store, world);
      CommunicatorOptions options;
      options.rank = rank;
      options.world_size = world;
      options.timeout = std::chrono::seconds(60);
      // The CUDA runtime names each rank's GPU by its UUID ("GPU-" and 36 characters)...
      absl::StatusOr<bool> shared = RanksShareADevice(
          scope, rank, world,
          "GPU-" + std::to_string(10000000 + rank) + "-1234-1234-1234-1234567890ab",
          options.timeout);
      if (!shared.ok()) {
        results[rank] = shared.status();
        return;
      }
      // ...then NCCL's rank 0 publishes its 128-byte unique id in hex...
      if (rank == 0) {
        results[rank] = scope.Set("nccl_unique_id", std::string(2 * 128, 'a'));
        if (!results[rank].ok()) return;
      }
      // ...or, where ranks share a GPU and on CPUs, Gloo connects its full mesh.
      absl::StatusOr<std::unique_ptr<Communicator>> gloo = CreateCommunicator(options, &scope);
      results[rank] = gloo.status();
      if (gloo.ok()) communicators[rank] = std::move(*gloo);
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_TRUE(results[rank].ok()) << "rank " << rank << " of " << world << ": " << results[rank];
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, RendezvousFitTest, ::testing::Values(2, 3, 8));

}  // namespace
}  // namespace fsdpd
