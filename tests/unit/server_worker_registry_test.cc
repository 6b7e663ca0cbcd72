// Worker ids bound to the credential that registered them, sessions replaced only once provably
// dead, claims that give no standing until confirmed, and the bounds on registration.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
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

class RecordingSession : public WorkerSession {
 public:
  void Send(const v1::CoordinatorMessage&) override {}
  void Close(const absl::Status& status) override { closed = status; }
  std::optional<absl::Status> closed;
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
  ASSERT_TRUE(registry_.AttachSession(id, session, now_).ok());
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

TEST_F(WorkerRegistryTest, ASessionOfALiveWorkerIsRefusedUntilTheOldOneIsProvablyDead) {
  auto first = registry_.Register(Request(), now_, "token:host-a");
  ASSERT_TRUE(first.ok());
  const std::string id = first->first;
  auto live = std::make_shared<RecordingSession>();
  ASSERT_TRUE(registry_.AttachSession(id, live, now_).ok());
  // The same credential, a second stream: refused while the first is heard from.
  auto second = std::make_shared<RecordingSession>();
  absl::Status refused = registry_.AttachSession(id, second, now_ + milliseconds(900));
  EXPECT_EQ(refused.code(), absl::StatusCode::kAlreadyExists) << refused;
  EXPECT_FALSE(live->closed.has_value());
  ASSERT_TRUE(registry_.Heartbeat(id, now_ + milliseconds(900)));
  EXPECT_EQ(registry_.AttachSession(id, second, now_ + milliseconds(1800)).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(live->closed.has_value());
  // Silent past the heartbeat timeout, it is provably dead and is replaced.
  ASSERT_TRUE(registry_.AttachSession(id, second, now_ + milliseconds(2000)).ok());
  ASSERT_TRUE(live->closed.has_value());
  EXPECT_EQ(live->closed->code(), absl::StatusCode::kAborted);
  // A closed stream is dead at once.
  registry_.DetachSession(id, second.get());
  EXPECT_TRUE(registry_.AttachSession(id, std::make_shared<RecordingSession>(), now_).ok());
}

TEST_F(WorkerRegistryTest, RegisteringAgainClosesASilentSessionSoTheNewOneIsAccepted) {
  auto first = registry_.Register(Request(), now_, "token:host-a");
  ASSERT_TRUE(first.ok());
  const std::string id = first->first;
  auto silent = std::make_shared<RecordingSession>();
  ASSERT_TRUE(registry_.AttachSession(id, silent, now_).ok());
  const auto later = now_ + milliseconds(1500);
  ASSERT_TRUE(registry_.Register(Request(id), later, "token:host-a").ok());
  ASSERT_TRUE(silent->closed.has_value());
  EXPECT_TRUE(registry_.AttachSession(id, std::make_shared<RecordingSession>(), later).ok());
}

v1::RegisterRequest Claiming(const std::string& id, const std::string& job, int attempt, int rank,
                             int gpu = 0) {
  v1::RegisterRequest request = Request(id, gpu);
  request.set_running_job_id(job);
  request.set_running_attempt(attempt);
  request.set_running_rank(rank);
  return request;
}

// Standing follows every change of assignment: a release, a registration again (which drops the
// assignment until it is confirmed), a reassignment to a later attempt, and two workers of one
// credential in one attempt.
TEST_F(WorkerRegistryTest, StandingFollowsAssignmentsThroughReleaseReregistrationAndRetry) {
  auto a = registry_.Register(Request("", 0), now_, "token:host-a");
  auto b = registry_.Register(Request("", 1), now_, "token:host-b");
  auto a2 = registry_.Register(Request("", 2), now_, "token:host-a");
  ASSERT_TRUE(a.ok() && b.ok() && a2.ok());
  registry_.Assign(a->first, {"job-000001", 1, 0});
  registry_.Assign(b->first, {"job-000001", 1, 1});
  registry_.Assign(a2->first, {"job-000001", 1, 2});
  EXPECT_EQ(registry_.Standing("token:host-b", "job-000001", 1).ranks, 3);
  EXPECT_TRUE(registry_.Standing("token:host-b", "job-000001", 1).runs);
  EXPECT_FALSE(registry_.Standing("token:host-b", "job-000001", 2).runs);  // another attempt

  // One of host-a's two ranks released: host-a still runs one.
  registry_.Release(a->first, "job-000001", 1);
  EXPECT_EQ(registry_.Standing("token:host-a", "job-000001", 1).ranks, 2);
  EXPECT_TRUE(registry_.Standing("token:host-a", "job-000001", 1).runs);
  registry_.Release(a2->first, "job-000001", 1);
  EXPECT_FALSE(registry_.Standing("token:host-a", "job-000001", 1).runs);

  // Registering again drops the assignment (it is a claim until confirmed).
  ASSERT_TRUE(registry_.Register(Request(b->first, 1), now_, "token:host-b").ok());
  const AttemptStanding gone = registry_.Standing("token:host-b", "job-000001", 1);
  EXPECT_FALSE(gone.runs);
  EXPECT_EQ(gone.ranks, 0);

  // A retry assigns the next attempt; the earlier one's scope stays empty.
  registry_.Assign(b->first, {"job-000001", 2, 0});
  EXPECT_TRUE(registry_.Standing("token:host-b", "job-000001", 2).runs);
  EXPECT_EQ(registry_.Standing("token:host-b", "job-000001", 2).ranks, 1);
  EXPECT_EQ(registry_.Standing("token:host-b", "job-000001", 1).ranks, 0);
  registry_.Assign(b->first, {"job-000002", 1, 0});  // moved on without a release
  EXPECT_FALSE(registry_.Standing("token:host-b", "job-000001", 2).runs);
  EXPECT_TRUE(registry_.Standing("token:host-b", "job-000002", 1).runs);
}

TEST_F(WorkerRegistryTest, AClaimKeepsTheWorkerBusyButGivesNoStandingUntilConfirmed) {
  auto real = registry_.Register(Request("", 0), now_, "token:host-a");
  ASSERT_TRUE(real.ok());
  registry_.Assign(real->first, {"job-000004", 1, 0});
  auto forged = registry_.Register(Claiming("", "job-000004", 1, 1, 1), now_, "token:rogue");
  ASSERT_TRUE(forged.ok());
  const std::string id = forged->first;

  // Off the scheduler, but shown with no job, and no standing in the attempt's scope.
  EXPECT_EQ(registry_.Find(id)->info.state(), v1::BUSY);
  EXPECT_EQ(registry_.Find(id)->info.job_id(), "");
  EXPECT_FALSE(registry_.Find(id)->assignment.active());
  EXPECT_FALSE(registry_.Standing("token:rogue", "job-000004", 1).runs);
  const AttemptStanding real_standing = registry_.Standing("token:host-a", "job-000004", 1);
  EXPECT_TRUE(real_standing.runs);
  EXPECT_EQ(real_standing.ranks, 1);  // the claim sizes nothing either

  // Confirmed (the job manager found the rank was assigned to this id), it counts.
  ASSERT_TRUE(registry_.ConfirmClaim(id));
  EXPECT_TRUE(registry_.Standing("token:rogue", "job-000004", 1).runs);
  EXPECT_EQ(registry_.Standing("token:host-a", "job-000004", 1).ranks, 2);
  EXPECT_EQ(registry_.Find(id)->info.job_id(), "job-000004");
  EXPECT_FALSE(registry_.ConfirmClaim(id));  // nothing left to confirm

  // A claim that is never confirmed ends when the worker reports that work ended.
  auto other = registry_.Register(Claiming("", "job-000009", 2, 0, 2), now_, "token:rogue");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(registry_.Find(other->first)->info.state(), v1::BUSY);
  registry_.Release(other->first, "job-000009", 2);
  EXPECT_EQ(registry_.Find(other->first)->info.state(), v1::IDLE);
  EXPECT_FALSE(registry_.Find(other->first)->claim.active());
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

// Fleet is built once and shared until a worker changes in a way it shows; a heartbeat changes
// nothing in it, and each change below is seen by the next Fleet.
TEST_F(WorkerRegistryTest, FleetIsSharedUntilAWorkerChangesInAWayItShows) {
  auto registered = registry_.Register(Request(), now_, "token:host-a");
  ASSERT_TRUE(registered.ok()) << registered.status();
  const std::string id = registered->first;
  auto session = std::make_shared<NullSession>();
  ASSERT_TRUE(registry_.AttachSession(id, session, now_).ok());
  auto state = [&] {
    const auto fleet = registry_.Fleet();
    EXPECT_EQ(fleet->size(), 1u);
    return fleet->empty() ? FleetWorker::State::kLost : fleet->front().state;
  };
  const auto first = registry_.Fleet();
  EXPECT_EQ(first->front().state, FleetWorker::State::kIdle);
  ASSERT_TRUE(registry_.Heartbeat(id, now_ + milliseconds(100)));
  EXPECT_EQ(registry_.Fleet(), first) << "a heartbeat rebuilt the fleet";

  registry_.Assign(id, {"job-000001", 1, 0});
  EXPECT_EQ(state(), FleetWorker::State::kRunning);
  EXPECT_EQ(registry_.Fleet()->front().job_id, "job-000001");
  registry_.Release(id, "job-000001", 1);
  EXPECT_EQ(state(), FleetWorker::State::kIdle);
  v1::WorkerHealth sick;
  sick.set_unhealthy("an attempt did not end");
  ASSERT_TRUE(registry_.SetHealth(id, sick));
  EXPECT_EQ(state(), FleetWorker::State::kAway);
  ASSERT_TRUE(registry_.SetHealth(id, v1::WorkerHealth()));
  EXPECT_EQ(state(), FleetWorker::State::kIdle);
  registry_.LowerMemory(id, 1 << 20, "an out-of-memory at 1 MiB");
  EXPECT_EQ(registry_.Fleet()->front().memory_bytes, 1 << 20);
  registry_.DetachSession(id, session.get());
  EXPECT_EQ(state(), FleetWorker::State::kAway) << "no session: takes nothing";
  ASSERT_TRUE(registry_.AttachSession(id, session, now_ + milliseconds(200)).ok());
  EXPECT_EQ(state(), FleetWorker::State::kIdle);
  registry_.ExpireSilent(now_ + milliseconds(5000), {});
  EXPECT_EQ(state(), FleetWorker::State::kLost);
  ASSERT_TRUE(registry_.Heartbeat(id, now_ + milliseconds(5100)));
  EXPECT_EQ(state(), FleetWorker::State::kIdle) << "heard again";
}

}  // namespace
}  // namespace fsdpd::server
