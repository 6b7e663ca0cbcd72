// Checkpoints and their exports in the job manager (server/job_manager_exports.cc): rank 0's
// reports are stored with the attempt's hosts and the pruned steps forgotten, a stranger's are
// ignored, and each is confirmed; PrepareExport resolves the step, sends the export to an idle
// worker on a host that holds it (taking it off the scheduler), reports a failure once, sends a
// lost worker's export to another, and READY once the upload is stored. And the checkpoints
// table arrives in a state folder from before it.
#include <sqlite3.h>

#include "tests/unit/server_job_manager_fixture.h"

namespace fsdpd::server {
namespace {

class CheckpointsTest : public JobManagerTest {
 protected:
  // A two-rank job on host-a and host-b; rank0_/rank1_ are its workers.
  void StartJob() {
    const std::string a = AddWorker("host-a", 0);
    const std::string b = AddWorker("host-b", 0);
    job_ = *jobs_->Submit(SmallSpec(2, 0));
    ASSERT_EQ(GetJob(job_).state(), v1::SCHEDULED);
    for (const std::string& worker : {a, b}) {
      const v1::Assignment assignment = sessions_[worker]->Assignments().front();
      (assignment.rank() == 0 ? rank0_ : rank1_) = worker;
    }
  }
  void Commit(const std::string& worker, int64_t step, std::vector<int64_t> committed,
              int attempt = 1) {
    v1::WorkerMessage message;
    v1::CheckpointCommitted* checkpoint = message.mutable_checkpoint();
    checkpoint->set_job_id(job_);
    checkpoint->set_job_uid(GetJob(job_).uid());
    checkpoint->set_attempt(attempt);
    checkpoint->set_step(step);
    checkpoint->set_size_bytes(1000 + step);
    checkpoint->set_world_size(2);
    checkpoint->set_unix_millis(1700000000000 + step);
    for (int64_t kept : committed) checkpoint->add_committed_steps(kept);
    jobs_->OnWorkerMessage(worker, message);
  }
  std::vector<int64_t> Listed() {
    std::vector<int64_t> steps;
    // Held here: a range-for over *ListCheckpoints(...) would outlive the StatusOr it reads.
    const absl::StatusOr<std::vector<CheckpointRecord>> records = jobs_->ListCheckpoints(job_);
    EXPECT_TRUE(records.ok()) << records.status();
    if (!records.ok()) return steps;
    for (const CheckpointRecord& record : *records) steps.push_back(record.step);
    return steps;
  }
  // Ends the job (cancelled) and frees its workers.
  void CancelJob() {
    ASSERT_TRUE(jobs_->Cancel(job_, "enough").ok());
    Result(rank0_, job_, 1, 0, false, "", true);
    Result(rank1_, job_, 1, 1, false, "", true);
  }
  std::vector<v1::ExportRequest> ExportRequests(const std::string& worker) {
    std::vector<v1::ExportRequest> found;
    for (const auto& message : sessions_[worker]->messages) {
      if (message.has_export_request()) found.push_back(message.export_request());
    }
    return found;
  }
  void ExportDone(const std::string& worker, int64_t step, bool ok, const std::string& error = "") {
    v1::WorkerMessage message;
    v1::ExportResult* result = message.mutable_export_result();
    result->set_job_id(job_);
    result->set_step(step);
    result->set_ok(ok);
    result->set_error(error);
    result->set_artifact_name(ArtifactStore::CheckpointArtifactName(step));
    jobs_->OnWorkerMessage(worker, message);
  }
  void Upload(const std::string& worker, int64_t step, const std::string& data) {
    v1::WorkerMessage message;
    v1::ArtifactChunk* chunk = message.mutable_artifact();
    chunk->set_job_id(job_);
    chunk->set_attempt(0);
    chunk->set_name(ArtifactStore::CheckpointArtifactName(step));
    chunk->mutable_chunk()->set_data(data);
    chunk->mutable_chunk()->set_total_bytes(static_cast<int64_t>(data.size()));
    chunk->set_last(true);
    jobs_->OnWorkerMessage(worker, message);
  }

  std::string job_, rank0_, rank1_;
};

TEST_F(CheckpointsTest, RankZerosReportsAreListedWithTheirHostsAndPrunedStepsForgotten) {
  StartJob();
  const size_t acks_before = sessions_[rank0_]->messages.size();
  Commit(rank0_, 5, {5});
  Commit(rank0_, 10, {10, 5});
  Commit(rank0_, 15, {15, 10});  // keep 2: step 5 was pruned
  EXPECT_EQ(Listed(), (std::vector<int64_t>{15, 10}));
  const CheckpointRecord newest = jobs_->ListCheckpoints(job_)->front();
  EXPECT_EQ(newest.size_bytes, 1015);
  EXPECT_EQ(newest.commit_unix_millis, 1700000000015);
  EXPECT_EQ(newest.attempt, 1);
  EXPECT_EQ(newest.world_size, 2);
  EXPECT_EQ(newest.hosts, (std::vector<std::string>{"host-a", "host-b"}));
  // Each report is confirmed to its worker, which may forget it then.
  int64_t confirmed = 0;
  for (const v1::ReportsStored& stored : Confirmations(*sessions_[rank0_], acks_before)) {
    if (stored.job_id() == job_ && stored.attempt() == 1) {
      confirmed = std::max(confirmed, stored.through_checkpoint_step());
    }
  }
  EXPECT_EQ(confirmed, 15);

  // Rank 1, a stranger, or another attempt's number: not rank 0 of that attempt.
  const std::string stranger = AddWorker("host-c", 0);
  Commit(rank1_, 20, {20});
  Commit(stranger, 25, {25});
  Commit(rank0_, 30, {30}, /*attempt=*/2);
  EXPECT_EQ(Listed(), (std::vector<int64_t>{15, 10}));

  // Cancelled right after a commit: rank 0's report still counts (the stored assignment).
  CancelJob();
  Commit(rank0_, 20, {20, 15});
  EXPECT_EQ(Listed(), (std::vector<int64_t>{20, 15}));

  Restart();
  EXPECT_EQ(Listed(), (std::vector<int64_t>{20, 15}));
  EXPECT_EQ(jobs_->ListCheckpoints("job-999999").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointsTest, AStepIsResolvedAndAnUnknownOneNamesTheStepsThereAre) {
  StartJob();
  absl::StatusOr<v1::ExportStatus> status = jobs_->PrepareExport(job_, 0);
  EXPECT_EQ(status.status().code(), absl::StatusCode::kNotFound) << status.status();
  EXPECT_THAT(status.status().message(), HasSubstr("no complete checkpoint to export"));
  Commit(rank0_, 5, {5});
  Commit(rank0_, 10, {10, 5});
  status = jobs_->PrepareExport(job_, 7);
  EXPECT_EQ(status.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.status().message(),
              HasSubstr("no complete checkpoint of step 7; its checkpoints are at steps 10, 5"));
  EXPECT_EQ(jobs_->CheckpointExportPath(job_, 7).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::string> path = jobs_->CheckpointExportPath(job_, 10);
  EXPECT_EQ(path.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(path.status().message(), HasSubstr("call PrepareExport first"));
  // Step 0 of a job that did not succeed: its newest checkpoint. Its workers are busy.
  status = jobs_->PrepareExport(job_, 0);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->step(), 10);
  EXPECT_EQ(status->state(), v1::ExportStatus::PREPARING);
  EXPECT_EQ(status->message(), "waiting for an idle worker on host-a or host-b");
}

TEST_F(CheckpointsTest, AnIdleWorkerOnAHostThatHoldsItExportsAndTakesNoRankMeanwhile) {
  StartJob();
  Commit(rank0_, 5, {5});
  const std::string elsewhere = AddWorker("host-c", 0);  // idle, but holds no checkpoint
  absl::StatusOr<v1::ExportStatus> status = jobs_->PrepareExport(job_, 5);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->state(), v1::ExportStatus::PREPARING);
  EXPECT_EQ(status->message(), "waiting for an idle worker on host-a or host-b");
  EXPECT_TRUE(status->worker_id().empty());
  CancelJob();

  status = jobs_->PrepareExport(job_, 5);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->state(), v1::ExportStatus::PREPARING);
  const std::string exporter = status->worker_id();
  ASSERT_TRUE(exporter == rank0_ || exporter == rank1_) << exporter;
  EXPECT_THAT(status->message(), HasSubstr("is consolidating step 5"));
  ASSERT_EQ(ExportRequests(exporter).size(), 1u);
  const v1::ExportRequest request = ExportRequests(exporter).front();
  EXPECT_EQ(request.job_uid(), GetJob(job_).uid());
  EXPECT_EQ(request.step(), 5);
  EXPECT_EQ(request.world_size(), 2);
  EXPECT_EQ(request.artifact_name(), "model-step-00000005.safetensors");
  EXPECT_EQ(request.model().dim(), GetJob(job_).spec().model().dim());
  EXPECT_TRUE(ExportRequests(elsewhere).empty());
  // Asked again while it runs: the same worker, no second request.
  EXPECT_EQ(jobs_->PrepareExport(job_, 5)->worker_id(), exporter);
  EXPECT_EQ(ExportRequests(exporter).size(), 1u);

  // A job of three ranks cannot start while the exporter consolidates.
  const std::string waiting = *jobs_->Submit(SmallSpec(3, 0));
  EXPECT_EQ(GetJob(waiting).state(), v1::PENDING);
  EXPECT_EQ(sessions_[exporter]->Assignments().size(), 1u);  // the first job's only

  // It fails: said once, naming why; then the worker takes the waiting job's rank.
  ExportDone(exporter, 5, false, "checkpoint step 5 rank 1: rank-00001.bin is missing");
  EXPECT_EQ(GetJob(waiting).state(), v1::SCHEDULED);
  status = jobs_->PrepareExport(job_, 5);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), v1::ExportStatus::FAILED);
  EXPECT_THAT(status->message(), HasSubstr("rank-00001.bin is missing"));
  status = jobs_->PrepareExport(job_, 5);  // asked again: waits for a worker once more
  EXPECT_EQ(status->state(), v1::ExportStatus::PREPARING);
  EXPECT_EQ(status->message(), "waiting for an idle worker on host-a or host-b");
}

TEST_F(CheckpointsTest, AnUploadedExportIsReadyAndALostExportersExportGoesToAnother) {
  StartJob();
  Commit(rank0_, 5, {5});
  CancelJob();
  absl::StatusOr<v1::ExportStatus> status = jobs_->PrepareExport(job_, 5);
  const std::string exporter = status->worker_id();
  const std::string other = exporter == rank0_ ? rank1_ : rank0_;

  // The exporter goes silent: once it is lost, the export goes to the other host's worker.
  now_ += registry_config_.heartbeat_timeout + std::chrono::seconds(1);
  Heartbeat(other);
  jobs_->Tick();
  ASSERT_EQ(StateOf(exporter), v1::LOST);
  status = jobs_->PrepareExport(job_, 5);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->state(), v1::ExportStatus::PREPARING);
  EXPECT_EQ(status->worker_id(), other);
  ASSERT_EQ(ExportRequests(other).size(), 1u);

  // Chunks from a worker it was not asked of are dropped; the one asked uploads.
  Upload(exporter, 5, "forged");
  EXPECT_FALSE(jobs_->CheckpointExportPath(job_, 5).ok());
  Upload(other, 5, "weights");
  ExportDone(other, 5, true);
  status = jobs_->PrepareExport(job_, 5);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->state(), v1::ExportStatus::READY);
  EXPECT_EQ(status->size_bytes(), 7);
  absl::StatusOr<std::string> path = jobs_->CheckpointExportPath(job_, 5);
  ASSERT_TRUE(path.ok()) << path.status();
  std::ifstream file(*path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(file), {}), "weights");
}

// A state folder written before the checkpoints table existed: it is added, and the jobs stay.
TEST_F(CheckpointsTest, AStateFolderFromBeforeGainsTheTable) {
  StartJob();
  Stop();
  sqlite3* database = nullptr;
  ASSERT_EQ(sqlite3_open((directory_ + "/fsdpd.db").c_str(), &database), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(database, "DROP TABLE checkpoints; PRAGMA user_version = 3", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(database);
  sessions_.clear();
  Start();
  EXPECT_EQ(GetJob(job_).spec().parallel().world_size(), 2);
  EXPECT_TRUE(Listed().empty());
  ASSERT_TRUE(store_->RecordCheckpoint({job_, 5, 1, 2, 1, 2, {"host-a"}}, {5}).ok());
  EXPECT_EQ(Listed(), (std::vector<int64_t>{5}));
}

}  // namespace
}  // namespace fsdpd::server
