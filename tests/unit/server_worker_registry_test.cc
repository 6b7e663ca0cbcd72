// Worker ids bound to the credential that registered them, and the bounds on registration.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "server/peer_rate_limiter.h"
#include "server/worker_registry.h"

namespace fsdpd::server {
namespace {

using std::chrono::milliseconds;

class NullSession : public WorkerSession {
 public:
  void Send(const v1::CoordinatorMessage&) override {}
  void Close(const absl::Status&) override {}
};

v1::RegisterRequest Request(const std::string& id = "", int gpu = 0) {
  v1::RegisterRequest request;
  request.set_worker_id(id);
  request.set_gpu_index(gpu);
  request.set_hostname("host");
  request.set_device_kind("cpu");
  request.set_memory_bytes(1 << 30);
  request.set_address("127.0.0.1");
  return request;
}

class WorkerRegistryTest : public ::testing::Test {
 protected:
  WorkerRegistryConfig Config() {
    WorkerRegistryConfig config;
    config.heartbeat_timeout = milliseconds(1000);
    config.max_workers = 3;
    return config;
  }
  WorkerRegistry registry_{Config()};
  WorkerRegistry::Clock::time_point now_ = WorkerRegistry::Clock::now();
};

TEST_F(WorkerRegistryTest, AnIdIsBoundToTheCredentialThatRegisteredIt) {
  auto first = registry_.Register(Request(), now_, "token:host-a");
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string id = first->first;
  EXPECT_EQ(registry_.Register(Request(id), now_, "token:rogue").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(registry_.CheckPrincipal(id, "token:rogue").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(registry_.CheckPrincipal(id, "token:host-a").ok());
  // The rogue's attempt changed nothing: the id still describes the real worker's host.
  EXPECT_EQ(registry_.Find(id)->info.hostname(), "host");
}

TEST_F(WorkerRegistryTest, ALiveSessionCannotBeReplacedAndIsReclaimedOnceGone) {
  auto first = registry_.Register(Request(), now_, "token:host-a");
  ASSERT_TRUE(first.ok());
  const std::string id = first->first;
  auto session = std::make_shared<NullSession>();
  ASSERT_TRUE(registry_.AttachSession(id, session));
  ASSERT_TRUE(registry_.Heartbeat(id, now_));
  EXPECT_EQ(
      registry_.Register(Request(id), now_ + milliseconds(500), "token:host-a").status().code(),
      absl::StatusCode::kAlreadyExists);
  // Silent past the heartbeat timeout: the same credential may take its id back.
  EXPECT_TRUE(registry_.Register(Request(id), now_ + milliseconds(1500), "token:host-a").ok());
  // Or at once after the session closed.
  registry_.DetachSession(id, session.get());
  EXPECT_TRUE(registry_.Register(Request(id), now_, "token:host-a").ok());
}

TEST_F(WorkerRegistryTest, NewIdsStopAtMaxWorkersButKnownOnesReturn) {
  std::string ids[3];
  for (int gpu = 0; gpu < 3; ++gpu) {  // three devices, so none takes back another's id
    auto registered = registry_.Register(Request("", gpu), now_, "token:host");
    ASSERT_TRUE(registered.ok());
    ids[gpu] = registered->first;
  }
  auto refused = registry_.Register(Request("", 3), now_, "token:host");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("--max-workers"), std::string::npos);
  EXPECT_TRUE(registry_.Register(Request(ids[1], 1), now_, "token:host").ok());
  EXPECT_EQ(registry_.List().size(), 3u);
}

TEST(PeerRateLimiterTest, EachHostHasItsOwnBucketWhateverItsPort) {
  PeerRateLimiter limiter(/*rate=*/2, /*burst=*/4);
  const auto start = PeerRateLimiter::Clock::now();
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(limiter.Take("ipv4:10.0.0.5:" + std::to_string(40000 + i), start).ok());
  }
  absl::Status refused = limiter.Take("ipv4:10.0.0.5:41000", start);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(limiter.Take("ipv4:10.0.0.6:40000", start).ok());
  // Half a second refills one call at 2 a second.
  EXPECT_TRUE(limiter.Take("ipv4:10.0.0.5:41001", start + milliseconds(500)).ok());
  EXPECT_FALSE(limiter.Take("ipv4:10.0.0.5:41002", start + milliseconds(500)).ok());
  EXPECT_EQ(PeerRateLimiter::PeerHost("ipv6:[::1]:41234"), "ipv6:[::1]");
}

}  // namespace
}  // namespace fsdpd::server
