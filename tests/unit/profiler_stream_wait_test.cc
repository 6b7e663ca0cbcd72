// Exposed communication as the device sees it: the profiling backend's events bracket every
// wait of the compute stream on a comm-stream record with the stream-wait timer (and no other
// wait), and the profiling communicator adds the timed waits to its blocked time.
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/backend/cpu_backend.h"
#include "worker/comm/communicator.h"
#include "worker/profiler/profiling_backend.h"
#include "worker/profiler/profiling_communicator.h"

namespace fsdpd {
namespace {

class FakeTimer : public StreamWaitTimer {
 public:
  explicit FakeTimer(std::vector<std::string>* calls) : calls_(calls) {}
  absl::Status Before(Stream&) override {
    calls_->push_back("before");
    return absl::OkStatus();
  }
  absl::Status After(Stream&) override {
    calls_->push_back("after");
    total_ += 0.25;
    return absl::OkStatus();
  }
  double total_seconds() override { return total_; }

 private:
  std::vector<std::string>* calls_;
  double total_ = 0.0;
};

class FixedCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  absl::Status AllGather(const Tensor&, const Tensor&, Stream&) override {
    return absl::OkStatus();
  }
  absl::Status ReduceScatter(const Tensor&, const Tensor&, ReduceOp, Stream&) override {
    return absl::OkStatus();
  }
  absl::Status AllReduce(const Tensor&, ReduceOp, Stream&) override { return absl::OkStatus(); }
  absl::Status Barrier() override { return absl::OkStatus(); }
  void Abort() override {}
  CommunicatorStats stats() const override {
    CommunicatorStats stats;
    stats.blocked_seconds = 1.0;
    return stats;
  }
};

TEST(ProfilerStreamWaitTest, OnlyComputeWaitsOnCommRecordsAreTimed) {
  ProfileRecorder recorder;
  ProfilingBackend backend(std::make_unique<CpuBackend>(), &recorder);
  std::vector<std::string> calls;
  backend.set_stream_wait_timer(std::make_unique<FakeTimer>(&calls));
  absl::StatusOr<std::unique_ptr<Event>> event = backend.CreateEvent();
  ASSERT_TRUE(event.ok()) << event.status();

  // Compute recorded, compute waits; comm recorded, comm waits: not the exposed kind.
  ASSERT_TRUE((*event)->Record(backend.compute_stream()).ok());
  ASSERT_TRUE((*event)->WaitOn(backend.comm_stream()).ok());
  ASSERT_TRUE((*event)->Record(backend.comm_stream()).ok());
  ASSERT_TRUE((*event)->WaitOn(backend.comm_stream()).ok());
  EXPECT_TRUE(calls.empty());
  // The compute stream waits on a comm record: bracketed.
  ASSERT_TRUE((*event)->WaitOn(backend.compute_stream()).ok());
  EXPECT_EQ(calls, (std::vector<std::string>{"before", "after"}));
  // Re-recorded on compute, the same event's wait is not communication any more.
  ASSERT_TRUE((*event)->Record(backend.compute_stream()).ok());
  ASSERT_TRUE((*event)->WaitOn(backend.compute_stream()).ok());
  EXPECT_EQ(calls.size(), 2u);
  EXPECT_DOUBLE_EQ(backend.stream_wait_seconds(), 0.25);

  ProfilingCommunicator communicator(std::make_unique<FixedCommunicator>(), &recorder, &backend);
  const CommunicatorStats stats = communicator.stats();
  EXPECT_DOUBLE_EQ(stats.stream_wait_seconds, 0.25);
  EXPECT_DOUBLE_EQ(stats.blocked_seconds, 1.25);
  ProfilingCommunicator without(std::make_unique<FixedCommunicator>(), &recorder);
  EXPECT_DOUBLE_EQ(without.stats().blocked_seconds, 1.0);
}

TEST(ProfilerStreamWaitTest, TheCpuBackendHasNoTimer) {
  ProfileRecorder recorder;
  ProfilingBackend backend(std::make_unique<CpuBackend>(), &recorder);
  absl::StatusOr<std::unique_ptr<Event>> event = backend.CreateEvent();
  ASSERT_TRUE(event.ok());
  ASSERT_TRUE((*event)->Record(backend.comm_stream()).ok());
  ASSERT_TRUE((*event)->WaitOn(backend.compute_stream()).ok());
  EXPECT_EQ(backend.stream_wait_seconds(), 0.0);
}

// The decorator forwards what the trainer asks of the backend it holds: a CUDA engine sits
// behind it, and the next batch is read ahead only where the device runs beside the host.
class BesideHostBackend : public CpuBackend {
 public:
  bool runs_beside_host() const override { return true; }
};

TEST(ProfilingBackendTest, ForwardsWhetherTheDeviceRunsBesideTheHost) {
  ProfileRecorder recorder;
  ProfilingBackend beside(std::make_unique<BesideHostBackend>(), &recorder);
  EXPECT_TRUE(beside.runs_beside_host());
  ProfilingBackend inline_cpu(std::make_unique<CpuBackend>(), &recorder);
  EXPECT_FALSE(inline_cpu.runs_beside_host());
}

}  // namespace
}  // namespace fsdpd
