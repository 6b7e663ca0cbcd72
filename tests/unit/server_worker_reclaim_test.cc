// The worker registry's identities: a restarted worker that registers without an id takes back
// the id of its host and device, under the same rules as an id sent back (same credential, old
// session gone), and never another credential's or a live worker's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "server/worker_registry.h"

namespace fsdpd::server {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

class NullSession : public WorkerSession {
 public:
  void Send(const v1::CoordinatorMessage&) override {}
  void Close(const absl::Status&) override {}
};

v1::RegisterRequest Device(const std::string& host, const std::string& kind, int gpu,
                           const std::string& uuid = "") {
  v1::RegisterRequest request;
  request.set_hostname(host);
  request.set_device_kind(kind);
  request.set_gpu_index(gpu);
  request.set_gpu_uuid(uuid);
  return request;
}

class WorkerReclaimTest : public ::testing::Test {
 protected:
  // Registers and attaches a session, as a worker's Register then Session do.
  std::string Join(const v1::RegisterRequest& request, const std::string& principal) {
    absl::StatusOr<std::pair<std::string, RankAssignment>> registered =
        registry_.Register(request, now_, principal);
    EXPECT_TRUE(registered.ok()) << registered.status();
    if (!registered.ok()) return "";
    sessions_[registered->first] = std::make_shared<NullSession>();
    EXPECT_TRUE(
        registry_.AttachSession(registered->first, sessions_[registered->first], now_).ok());
    registry_.Heartbeat(registered->first, now_);
    return registered->first;
  }
  // The process dies: its stream ends, and the heartbeat timeout marks it LOST while the
  // others keep beating.
  void Kill(const std::string& id) {
    registry_.DetachSession(id, sessions_[id].get());
    sessions_.erase(id);
    now_ += registry_.config().heartbeat_timeout + std::chrono::seconds(1);
    for (const auto& [live, session] : sessions_) registry_.Heartbeat(live, now_);
    registry_.ExpireSilentWorkers(now_);
  }
  v1::WorkerState StateOf(const std::string& id) { return registry_.Find(id)->info.state(); }

  WorkerRegistry registry_{WorkerRegistryConfig{}};
  Clock::time_point now_ = Clock::now();
  std::map<std::string, std::shared_ptr<NullSession>> sessions_;
};

TEST_F(WorkerReclaimTest, RestartedWorkerTakesBackTheIdOfItsHostAndDevice) {
  const std::string gpu0 = Join(Device("host-a", "cuda", 0, "GPU-0"), "alice");
  const std::string gpu1 = Join(Device("host-a", "cuda", 1, "GPU-1"), "alice");
  Kill(gpu0);
  ASSERT_EQ(StateOf(gpu0), v1::LOST);
  EXPECT_EQ(registry_.CountByState()[v1::LOST], 1);

  const std::string back = Join(Device("host-a", "cuda", 0, "GPU-0"), "alice");
  EXPECT_EQ(back, gpu0);
  EXPECT_EQ(StateOf(gpu0), v1::IDLE);
  EXPECT_EQ(registry_.CountByState()[v1::LOST], 0);
  EXPECT_EQ(registry_.List().size(), 2u);
  EXPECT_NE(back, gpu1);
}

TEST_F(WorkerReclaimTest, ReturningIdNeedsTheSameCredential) {
  const std::string old = Join(Device("host-a", "cuda", 0), "alice");
  Kill(old);
  const std::string other = Join(Device("host-a", "cuda", 0), "mallory");
  EXPECT_NE(other, old);
  EXPECT_EQ(StateOf(old), v1::LOST);  // still bound to alice
  // Sending the id explicitly is refused too.
  v1::RegisterRequest explicit_id = Device("host-a", "cuda", 0);
  explicit_id.set_worker_id(old);
  absl::StatusOr<std::pair<std::string, RankAssignment>> taken =
      registry_.Register(explicit_id, now_, "mallory");
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kPermissionDenied) << taken.status();
}

TEST_F(WorkerReclaimTest, LiveWorkerKeepsItsIdFromASecondProcessOnTheSameDevice) {
  const std::string live = Join(Device("host-a", "cpu", -1), "alice");
  // A second CPU worker on the same host while the first is live gets an id of its own.
  const std::string second = Join(Device("host-a", "cpu", -1), "alice");
  EXPECT_NE(second, live);
  EXPECT_EQ(StateOf(live), v1::IDLE);
  EXPECT_EQ(StateOf(second), v1::IDLE);
}

TEST_F(WorkerReclaimTest, WorkersStartingTogetherOnOneHostGetTheirOwnIds) {
  // The first has registered but not opened its session yet when the second registers.
  absl::StatusOr<std::pair<std::string, RankAssignment>> first =
      registry_.Register(Device("host-a", "cpu", -1), now_, "");
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::pair<std::string, RankAssignment>> second =
      registry_.Register(Device("host-a", "cpu", -1), now_, "");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(first->first, second->first);
  EXPECT_EQ(registry_.List().size(), 2u);
}

TEST_F(WorkerReclaimTest, ADifferentDeviceOrGpuDoesNotTakeTheId) {
  const std::string old = Join(Device("host-a", "cuda", 0, "GPU-0"), "alice");
  Kill(old);
  EXPECT_NE(Join(Device("host-a", "cuda", 1, "GPU-1"), "alice"), old);
  EXPECT_NE(Join(Device("host-b", "cuda", 0, "GPU-0"), "alice"), old);
  EXPECT_NE(Join(Device("host-a", "cpu", -1), "alice"), old);
  // Index 0 now names another physical GPU (its UUID differs).
  EXPECT_NE(Join(Device("host-a", "cuda", 0, "GPU-9"), "alice"), old);
  EXPECT_EQ(StateOf(old), v1::LOST);
}

TEST_F(WorkerReclaimTest, ReturningWorkerGetsThePreviousAssignmentToReconcile) {
  const std::string old = Join(Device("host-a", "cuda", 0), "alice");
  registry_.Assign(old, {"job-1", 2, 1});
  // The stream ends and the process restarts before the heartbeat timeout.
  registry_.DetachSession(old, sessions_[old].get());
  absl::StatusOr<std::pair<std::string, RankAssignment>> back =
      registry_.Register(Device("host-a", "cuda", 0), now_, "alice");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->first, old);
  // The job manager fails the rank the old process ran, as for an id sent back.
  EXPECT_EQ(back->second.job_id, "job-1");
  EXPECT_EQ(back->second.attempt, 2);
  EXPECT_EQ(back->second.rank, 1);
}

TEST(WorkerRegistryConfigTest, LostRetentionShorterThanTheHeartbeatTimeoutIsRejected) {
  WorkerRegistryConfig config;
  config.lost_retention = config.heartbeat_timeout - std::chrono::milliseconds(1);
  const absl::Status status = config.Check();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("lost-worker-retention"));
}

}  // namespace
}  // namespace fsdpd::server
