// GlooStoreAdapter: Gloo's wait-then-get costs one read of the rendezvous store per key, a get
// with no wait before it reads the store, and a failed read is Gloo's IoException.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "gloo/common/error.h"
#include "worker/comm/gloo_store_adapter.h"

namespace fsdpd {
namespace {

using ::testing::HasSubstr;

// A store in memory that counts the reads (each stands for one call to the coordinator).
class CountingStore : public KeyValueStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    values[key] = value;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds) override {
    ++gets;
    auto found = values.find(key);
    if (found == values.end()) return absl::DeadlineExceededError("no key " + key);
    return found->second;
  }
  absl::StatusOr<int64_t> Add(const std::string&, int64_t) override {
    return absl::UnimplementedError("not used");
  }
  std::map<std::string, std::string> values;
  int gets = 0;
};

std::vector<char> Bytes(const std::string& text) { return {text.begin(), text.end()}; }

TEST(GlooStoreAdapterTest, AGetAfterAWaitReadsTheStoreOnce) {
  CountingStore store;
  GlooStoreAdapter adapter(&store, "gloo/", std::chrono::seconds(1));
  adapter.set("1", Bytes("address-of-1"));
  EXPECT_EQ(store.values.at("gloo/1"), "address-of-1");

  adapter.wait({"1"});
  EXPECT_EQ(adapter.get("1"), Bytes("address-of-1"));
  EXPECT_EQ(store.gets, 1);

  // What a wait read is handed out once: a second get reads the store again.
  store.values["gloo/1"] = "read-again";
  EXPECT_EQ(adapter.get("1"), Bytes("read-again"));
  EXPECT_EQ(store.gets, 2);
}

TEST(GlooStoreAdapterTest, AGetWithoutAWaitReadsTheStore) {
  CountingStore store;
  GlooStoreAdapter adapter(&store, "p/", std::chrono::seconds(1));
  adapter.set("k", Bytes("v"));
  EXPECT_EQ(adapter.get("k"), Bytes("v"));
  EXPECT_EQ(store.gets, 1);
}

TEST(GlooStoreAdapterTest, AMissingKeyIsGloosIoExceptionNamingTheKey) {
  CountingStore store;
  GlooStoreAdapter adapter(&store, "p/", std::chrono::seconds(1));
  try {
    adapter.wait({"7"});
    FAIL() << "a wait for a key that never comes must throw";
  } catch (const gloo::IoException& error) {
    EXPECT_THAT(error.what(), HasSubstr("'7'"));
  }
  try {
    adapter.get("8");
    FAIL() << "a get of a key that never comes must throw";
  } catch (const gloo::IoException& error) {
    EXPECT_THAT(error.what(), HasSubstr("'8'"));
  }
}

}  // namespace
}  // namespace fsdpd
