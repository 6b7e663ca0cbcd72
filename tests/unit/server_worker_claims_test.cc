// What a worker says it runs when it registers is a claim, weighed against what the coordinator
// assigned to that worker id: a claim on another worker's rank gives no standing (no log lines,
// no step reports) and is cancelled; a rank the coordinator did assign is confirmed, even after
// a restart and after its attempt ended. Fixture: server_job_manager_fixture.h.
#include "tests/unit/server_job_manager_fixture.h"

namespace fsdpd::server {
namespace {

v1::WorkerMessage LogLine(const std::string& job, int attempt, int rank, int64_t sequence,
                          const std::string& text) {
  v1::WorkerMessage message;
  v1::LogLine* line = message.mutable_log();
  line->set_job_id(job);
  line->set_attempt(attempt);
  line->set_rank(rank);
  line->set_sequence(sequence);
  line->set_text(text);
  return message;
}

std::vector<std::string> StoredTexts(SqliteJobStore& store, const std::string& job) {
  EXPECT_TRUE(store.Flush().ok());
  absl::StatusOr<std::vector<v1::LogLine>> lines = store.LoadLogs(job, 0);
  EXPECT_TRUE(lines.ok()) << lines.status();
  std::vector<std::string> texts;
  if (lines.ok()) {
    for (const v1::LogLine& line : *lines) texts.push_back(line.text());
  }
  return texts;
}

std::string CancellationReason(const FakeSession& session) {
  for (const auto& message : session.messages) {
    if (message.has_cancellation()) return message.cancellation().reason();
  }
  return "";
}

TEST_F(JobManagerTest, AClaimOnAnotherWorkersRankGivesNoStandingAndIsCancelled) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-b", 0);
  const std::string id = *jobs_->Submit(SmallSpec(2, 0));
  const v1::Job job = GetJob(id);
  ASSERT_EQ(job.worker_ids_size(), 2);
  const std::string rank0 = job.worker_ids(0);

  const std::string forged = AddWorker("evil", 0, "", {id, 1, 0});
  EXPECT_FALSE(registry_->Find(forged)->assignment.active());
  EXPECT_EQ(StateOf(forged), v1::BUSY);  // kept off the scheduler until it reports
  EXPECT_THAT(CancellationReason(*sessions_[forged]),
              HasSubstr("did not assign " + id + " attempt 1 rank 0 to worker " + forged));

  // Its lines and steps, numbered as rank 0's would be, are not stored: rank 0's own are.
  for (int64_t sequence = 1; sequence <= 5; ++sequence) {
    jobs_->OnWorkerMessage(forged, LogLine(id, 1, 0, sequence, "forged"));
    jobs_->OnWorkerMessage(forged, LogLine(id, 1, 1, sequence, "forged"));
  }
  jobs_->OnWorkerMessage(forged, LogLine(id, 1, 0, 0, "forged unnumbered"));
  Step(forged, id, 1, 0, 7, 99.0, 10);
  Step(forged, id, 1, 1, 7, 99.0, 10);
  EXPECT_EQ(GetJob(id).step(), 0);
  jobs_->OnWorkerMessage(rank0, LogLine(id, 1, 0, 1, "real"));
  EXPECT_THAT(StoredTexts(*store_, id), ::testing::ElementsAre("real"));

  // Reporting that work ended frees the forged worker and changes nothing else.
  Result(forged, id, 1, 0, false, "", true);
  EXPECT_EQ(StateOf(forged), v1::IDLE);
  EXPECT_EQ(GetJob(id).state(), v1::SCHEDULED);
}

// Even a rank of the job writes only its own numbered lines: the store keeps a number once per
// (attempt, rank), so a line sent as another rank would take that rank's number.
TEST_F(JobManagerTest, ARankCannotTakeAnotherRanksLineNumbers) {
  AddWorker("host-a", 0);
  AddWorker("host-b", 0);
  const std::string id = *jobs_->Submit(SmallSpec(2, 0));
  const v1::Job job = GetJob(id);
  ASSERT_EQ(job.worker_ids_size(), 2);
  jobs_->OnWorkerMessage(job.worker_ids(0), LogLine(id, 1, 1, 1, "rank 0 posing as rank 1"));
  jobs_->OnWorkerMessage(job.worker_ids(0), LogLine(id, 2, 0, 1, "rank 0 of another attempt"));
  jobs_->OnWorkerMessage(job.worker_ids(1), LogLine(id, 1, 1, 1, "rank 1's first line"));
  EXPECT_THAT(StoredTexts(*store_, id), ::testing::ElementsAre("rank 1's first line"));
}

TEST_F(JobManagerTest, AWorkersOwnRankIsConfirmedAfterARestartEvenOnceItsAttemptEnded) {
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-a", 1);
  const std::string id = *jobs_->Submit(SmallSpec(2, 0));
  Step(w0, id, 1, 0, 1, 5.0, 10);
  Step(w1, id, 1, 1, 1, 5.0, 10);
  Restart();

  // Rank 0 comes back in time: its rank is confirmed, its lines count.
  AddWorker("host-a", 0, w0, {id, 1, 0});
  EXPECT_TRUE(registry_->Find(w0)->assignment.active());
  // Rank 1 does not, and the attempt fails.
  now_ += std::chrono::seconds(11);
  Heartbeat(w0);
  jobs_->Tick();
  ASSERT_EQ(GetJob(id).state(), v1::FAILED);

  // When rank 1 comes back, the stored assignment says the rank was its own: its last lines
  // are kept, and it is told the attempt is over. Another worker claiming it gets neither.
  AddWorker("host-a", 1, w1, {id, 1, 1});
  EXPECT_TRUE(registry_->Find(w1)->assignment.active());
  EXPECT_THAT(CancellationReason(*sessions_[w1]), HasSubstr("no longer active"));
  const std::string forged = AddWorker("evil", 0, "", {id, 1, 1});
  EXPECT_FALSE(registry_->Find(forged)->assignment.active());
  jobs_->OnWorkerMessage(forged, LogLine(id, 1, 1, 1, "forged"));
  jobs_->OnWorkerMessage(w1, LogLine(id, 1, 1, 1, "rank 1's last line"));
  EXPECT_THAT(StoredTexts(*store_, id), ::testing::Contains("rank 1's last line"));
  EXPECT_THAT(StoredTexts(*store_, id), ::testing::Not(::testing::Contains("forged")));
}

}  // namespace
}  // namespace fsdpd::server
