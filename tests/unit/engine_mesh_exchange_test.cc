// ExchangeMeshAddresses: every rank reads the record each peer kept for it, in three store
// calls however many ranks there are; KeyValueStore's default GetMany reads parts of values.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/unit/engine_test_support.h"
#include "worker/comm/file_key_value_store.h"
#include "worker/comm/mesh_exchange.h"

namespace fsdpd {
namespace {

using std::chrono::milliseconds;

// rank's address for peer: distinct for every ordered pair, and of one size.
std::string AddressOf(int rank, int peer) { return absl::StrCat(100 + rank, "->", 100 + peer); }

MeshExchange ExchangeFor(int rank, int size, const std::string& host) {
  MeshExchange exchange;
  exchange.prefix = "gloo/";
  exchange.rank = rank;
  exchange.size = size;
  exchange.host = host;
  exchange.timeout = milliseconds(10000);
  for (int peer = 0; peer < size; ++peer) exchange.addresses.push_back(AddressOf(rank, peer));
  return exchange;
}

// A store in memory that counts its calls, each standing for one call to the coordinator.
class CountingStore : public KeyValueStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++calls;
    values_[key] = value;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Get(const std::string& key, milliseconds) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = values_.find(key);
    if (found == values_.end()) return absl::DeadlineExceededError("no key " + key);
    return found->second;
  }
  absl::StatusOr<std::vector<std::string>> GetMany(const std::vector<KeyPart>& keys,
                                                   milliseconds timeout) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++calls;
    }
    return KeyValueStore::GetMany(keys, timeout);
  }
  absl::StatusOr<int64_t> Add(const std::string&, int64_t) override {
    return absl::UnimplementedError("not used");
  }
  int calls = 0;

 private:
  std::mutex mutex_;
  std::map<std::string, std::string> values_;
};

TEST(MeshExchangeTest, EveryRankReadsTheRecordEachPeerKeptForItAndItsLocalRank) {
  testing::TempDir dir;
  auto store = FileKeyValueStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  const std::vector<std::string> hosts = {"a", "a", "b", "a", "b"};
  const int size = static_cast<int>(hosts.size());
  std::vector<absl::StatusOr<MeshPeers>> results(size, absl::UnknownError("not run"));
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < size; ++rank) {
    ranks.emplace_back([&, rank] {
      results[rank] = ExchangeMeshAddresses(**store, ExchangeFor(rank, size, hosts[rank]));
    });
  }
  for (std::thread& rank : ranks) rank.join();
  const std::vector<int> local_ranks = {0, 1, 0, 2, 1};
  for (int rank = 0; rank < size; ++rank) {
    ASSERT_TRUE(results[rank].ok()) << results[rank].status();
    EXPECT_EQ(results[rank]->local_rank, local_ranks[rank]) << "rank " << rank;
    for (int peer = 0; peer < size; ++peer) {
      EXPECT_EQ(results[rank]->peer_addresses[peer], peer == rank ? "" : AddressOf(peer, rank))
          << "rank " << rank << ", peer " << peer;
    }
  }
}

TEST(MeshExchangeTest, EachRankMakesThreeCallsWhateverTheSize) {
  for (int size : {2, 9, 40}) {
    CountingStore store;
    // This store's reads do not wait, so the ranks publish first, as a real exchange's would
    // before the last rank reads.
    for (int rank = 0; rank < size; ++rank) {
      std::string list;
      for (int peer = 0; peer < size; ++peer) {
        if (peer != rank) list += AddressOf(rank, peer);
      }
      ASSERT_TRUE(store.Set(absl::StrCat("gloo/mesh/", rank), list).ok());
      ASSERT_TRUE(store.Set(absl::StrCat("gloo/host/", rank), "h").ok());
    }
    store.calls = 0;
    for (int rank = 0; rank < size; ++rank) {
      absl::StatusOr<MeshPeers> peers = ExchangeMeshAddresses(store, ExchangeFor(rank, size, "h"));
      ASSERT_TRUE(peers.ok()) << peers.status();
      const int next = (rank + 1) % size;
      EXPECT_EQ(peers->peer_addresses[next], AddressOf(next, rank));
      EXPECT_EQ(peers->local_rank, rank);
    }
    EXPECT_EQ(store.calls, 3 * size) << size << " ranks";
  }
}

TEST(MeshExchangeTest, AddressesOfDifferentSizesAreRefusedBeforeAnythingIsPublished) {
  CountingStore store;
  MeshExchange exchange = ExchangeFor(1, 3, "h");
  exchange.addresses[2] += "x";
  absl::StatusOr<MeshPeers> peers = ExchangeMeshAddresses(store, exchange);
  EXPECT_EQ(peers.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(peers.status().message().find("for rank 2"), std::string::npos) << peers.status();
  EXPECT_EQ(store.calls, 0);
}

TEST(MeshExchangeTest, APeerThatNeverPublishesIsATimeoutNamingItsKey) {
  testing::TempDir dir;
  auto store = FileKeyValueStore::Open(dir.path());
  ASSERT_TRUE(store.ok());
  MeshExchange exchange = ExchangeFor(0, 2, "h");
  exchange.timeout = milliseconds(100);
  absl::StatusOr<MeshPeers> peers = ExchangeMeshAddresses(**store, exchange);
  EXPECT_EQ(peers.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(peers.status().message().find("gloo/mesh/1"), std::string::npos) << peers.status();
}

TEST(KeyValueStoreTest, GetManyReadsWholeValuesAndPartsInOrderAndRefusesBadParts) {
  CountingStore store;
  ASSERT_TRUE(store.Set("list", "aaabbbccc").ok());
  ASSERT_TRUE(store.Set("whole", "w").ok());
  absl::StatusOr<std::vector<std::string>> values =
      store.GetMany({{"list", 2, 3}, {"whole"}, {"list", 0, 3}}, milliseconds(100));
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::string>{"ccc", "w", "aaa"}));
  EXPECT_EQ(store.GetMany({{"list", 3, 3}}, milliseconds(100)).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<std::string>> uneven =
      store.GetMany({{"list", 0, 4}}, milliseconds(100));
  EXPECT_EQ(uneven.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(uneven.status().message().find("9 bytes"), std::string::npos) << uneven.status();
}

}  // namespace
}  // namespace fsdpd
