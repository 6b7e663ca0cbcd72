// What a submission carries besides its spec: labels (validated, stored, kept across a restart),
// the origin of a resubmitted job, weights_from resolved against the recorded checkpoints (the
// stored spec carries the origin's uid and the resolved step), and the attempts record.
#include "server/job_labels.h"
#include "tests/unit/server_job_manager_fixture.h"

namespace fsdpd::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class JobManagerOriginTest : public JobManagerTest {
 protected:
  void SetUp() override {
    JobManagerTest::SetUp();
    source_ = *jobs_->Submit(SmallSpec(2, 0));
    // What rank 0's reports leave in the checkpoints table: three complete checkpoints.
    for (int64_t step : {100, 200, 300}) {
      CheckpointRecord record;
      record.job_id = source_;
      record.step = step;
      record.world_size = 2;
      ASSERT_TRUE(store_->RecordCheckpoint(record, {step, 200, 100}).ok());
    }
  }

  // The field errors of a refused submission (empty if it was accepted).
  std::vector<FieldError> Refusal(const v1::JobSpec& spec, const SubmitDetails& details) {
    std::vector<FieldError> errors;
    absl::StatusOr<std::string> id = jobs_->Submit(spec, "", &errors, Role::kAdmin, details);
    EXPECT_EQ(id.ok(), errors.empty()) << id.status();
    if (!id.ok()) EXPECT_TRUE(absl::IsInvalidArgument(id.status())) << id.status();
    return errors;
  }

  static SubmitDetails From(const std::string& job_id, int64_t step) {
    SubmitDetails details;
    details.origin.mutable_weights_from()->set_job_id(job_id);
    details.origin.mutable_weights_from()->set_step(step);
    return details;
  }

  static std::vector<std::string> Fields(const std::vector<FieldError>& errors) {
    std::vector<std::string> fields;
    for (const FieldError& error : errors) fields.push_back(error.field);
    return fields;
  }

  std::string source_;
};

TEST_F(JobManagerOriginTest, WeightsFromStepZeroIsTheNewestCheckpointAndSetsTheStoredSpec) {
  SubmitDetails details = From(source_, 0);
  details.origin.set_resubmitted_from(source_);
  details.origin.add_overrides("parallel.world_size=1");
  // The world size may differ from the origin's.
  const std::string id = *jobs_->Submit(SmallSpec(1, 0), "", nullptr, Role::kAdmin, details);
  const v1::Job job = GetJob(id);
  EXPECT_EQ(job.origin().weights_from().job_id(), source_);
  EXPECT_EQ(job.origin().weights_from().step(), 300);
  EXPECT_EQ(job.origin().resubmitted_from(), source_);
  EXPECT_THAT(job.origin().overrides(), ElementsAre("parallel.world_size=1"));
  EXPECT_EQ(job.spec().checkpoint().init_from_job_uid(), GetJob(source_).uid());
  EXPECT_EQ(job.spec().checkpoint().init_from_step(), 300);

  const std::string older =
      *jobs_->Submit(SmallSpec(1, 0), "", nullptr, Role::kAdmin, From(source_, 200));
  EXPECT_EQ(GetJob(older).spec().checkpoint().init_from_step(), 200);
  EXPECT_EQ(GetJob(older).origin().weights_from().step(), 200);

  // Stored: a restarted coordinator has the same.
  Restart();
  EXPECT_EQ(GetJob(id).origin().weights_from().step(), 300);
  EXPECT_EQ(GetJob(id).spec().checkpoint().init_from_step(), 300);
}

TEST_F(JobManagerOriginTest, AStepThatIsNoCompleteCheckpointIsRefusedListingTheSteps) {
  const std::vector<FieldError> errors = Refusal(SmallSpec(2, 0), From(source_, 250));
  ASSERT_THAT(Fields(errors), ElementsAre("origin.weights_from.step"));
  EXPECT_THAT(errors[0].message, HasSubstr("no complete checkpoint at step 250"));
  EXPECT_THAT(errors[0].message, HasSubstr("300, 200, 100"));
}

TEST_F(JobManagerOriginTest, AnUnknownOriginJobIsRefused) {
  const std::vector<FieldError> errors = Refusal(SmallSpec(2, 0), From("job-000404", 0));
  ASSERT_THAT(Fields(errors), ElementsAre("origin.weights_from.job_id"));
  EXPECT_THAT(errors[0].message, HasSubstr("no job with id \"job-000404\""));
  SubmitDetails resubmitted;
  resubmitted.origin.set_resubmitted_from("job-000404");
  EXPECT_THAT(Fields(Refusal(SmallSpec(2, 0), resubmitted)),
              ElementsAre("origin.resubmitted_from"));
}

TEST_F(JobManagerOriginTest, ADifferentModelIsRefusedNamingTheField) {
  v1::JobSpec spec = SmallSpec(2, 0);
  spec.mutable_model()->set_dim(spec.model().dim() * 2);
  const std::vector<FieldError> errors = Refusal(spec, From(source_, 0));
  ASSERT_THAT(Fields(errors), ElementsAre("model"));
  EXPECT_THAT(errors[0].message, HasSubstr("model.dim is " + std::to_string(spec.model().dim())));
}

TEST_F(JobManagerOriginTest, TheCoordinatorsOwnFieldsAndInitFromWithWeightsFromAreRefused) {
  v1::JobSpec spec = SmallSpec(2, 0);
  spec.mutable_checkpoint()->set_init_from_job_uid("someone-elses");
  spec.mutable_checkpoint()->set_init_from_step(5);
  std::vector<FieldError> errors = Refusal(spec, {});
  ASSERT_THAT(Fields(errors),
              ElementsAre("checkpoint.init_from_job_uid", "checkpoint.init_from_step"));
  EXPECT_THAT(errors[0].message, HasSubstr("set by the coordinator from --from"));
  // A dry run (CheckSpec alone) says the same.
  EXPECT_THAT(Fields(jobs_->CheckSpec(spec)),
              ElementsAre("checkpoint.init_from_job_uid", "checkpoint.init_from_step"));

  spec = SmallSpec(2, 0);
  spec.mutable_checkpoint()->set_init_from("/data/init.safetensors");
  errors = Refusal(spec, From(source_, 0));
  ASSERT_THAT(Fields(errors), ElementsAre("checkpoint.init_from"));
  EXPECT_THAT(errors[0].message, HasSubstr("--from"));
}

TEST_F(JobManagerOriginTest, AJobWithoutCheckpointsGivesNoWeights) {
  const std::string bare = *jobs_->Submit(SmallSpec(2, 0));
  const std::vector<FieldError> errors = Refusal(SmallSpec(2, 0), From(bare, 0));
  ASSERT_THAT(Fields(errors), ElementsAre("origin.weights_from"));
  EXPECT_THAT(errors[0].message, HasSubstr("has no complete checkpoint"));
}

TEST_F(JobManagerOriginTest, LabelsAreValidatedStoredAndKeptAcrossARestart) {
  SubmitDetails details;
  details.labels = {{"team", "nlp"}, {"example.com/sweep", "lr-1e-4"}, {"empty", ""}};
  const std::string id = *jobs_->Submit(SmallSpec(2, 0), "", nullptr, Role::kAdmin, details);
  Restart();
  const v1::Job job = GetJob(id);
  EXPECT_EQ(LabelsOf(job.labels()), details.labels);
  EXPECT_TRUE(MatchesLabels(job, {{"team", "nlp"}}));
  EXPECT_TRUE(MatchesLabels(job, {{"team", "nlp"}, {"empty", ""}}));
  EXPECT_FALSE(MatchesLabels(job, {{"team", "nlp"}, {"sweep", "x"}}));
  EXPECT_FALSE(MatchesLabels(job, {{"team", "NLP"}}));

  SubmitDetails bad;
  bad.labels = {{"bad key", "x"}, {"k", std::string(64, 'v')}, {"-dash", "x"}, {"v", "a b"}};
  const std::vector<FieldError> errors = Refusal(SmallSpec(2, 0), bad);
  ASSERT_THAT(Fields(errors), ElementsAre("labels[\"-dash\"]", "labels[\"bad key\"]",
                                          "labels[\"k\"]", "labels[\"v\"]"));
  EXPECT_THAT(errors[0].message, HasSubstr("begin and end with a letter or digit"));
  EXPECT_THAT(errors[1].message, HasSubstr("not ' '"));
  EXPECT_THAT(errors[2].message, HasSubstr("64 characters long; at most 63"));
  SubmitDetails many;
  for (int i = 0; i <= kMaxLabels; ++i) many.labels["k" + std::to_string(i)] = "v";
  EXPECT_THAT(Fields(Refusal(SmallSpec(2, 0), many)), ElementsAre("labels"));
  SubmitDetails longest;
  longest.labels = {{std::string(63, 'k'), std::string(63, 'v')}};
  EXPECT_THAT(Refusal(SmallSpec(2, 0), longest), IsEmpty());
}

TEST_F(JobManagerOriginTest, EachAttemptIsRecordedWithItsWorkersHostsAndOutcome) {
  ASSERT_TRUE(jobs_->Cancel(source_, "").ok());  // the workers are this test's job's
  const std::string w0 = AddWorker("host-a", 0);
  const std::string w1 = AddWorker("host-b", 0);
  const std::string id = *jobs_->Submit(SmallSpec(2, 1));
  v1::Job job = GetJob(id);
  ASSERT_EQ(job.state(), v1::SCHEDULED);
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).number(), 1);
  ASSERT_EQ(job.attempts(0).ranks_size(), 2);
  EXPECT_EQ(job.attempts(0).ranks(0).worker_id(), job.worker_ids(0));
  EXPECT_EQ(job.attempts(0).ranks(0).hostname(), job.worker_ids(0) == w0 ? "host-a" : "host-b");
  EXPECT_EQ(job.attempts(0).ranks(1).rank(), 1);
  EXPECT_TRUE(job.attempts(0).has_start_time());
  EXPECT_FALSE(job.attempts(0).has_end_time());

  Step(w0, id, 1, 0, 3, 2.0, 10);
  Step(w1, id, 1, 1, 3, 2.0, 10);
  Result(w0, id, 1, 0, false, "boom");
  job = GetJob(id);
  ASSERT_GE(job.attempts_size(), 1);
  EXPECT_TRUE(job.attempts(0).has_end_time());
  EXPECT_THAT(job.attempts(0).outcome(), HasSubstr("failed: boom"));
  EXPECT_EQ(job.attempts(0).final_step(), 3);

  Restart();  // the record is stored with the job
  job = GetJob(id);
  ASSERT_GE(job.attempts_size(), 1);
  EXPECT_THAT(job.attempts(0).outcome(), HasSubstr("failed: boom"));
  EXPECT_EQ(job.attempts(0).ranks(1).hostname(),
            job.attempts(0).ranks(1).worker_id() == w0 ? "host-a" : "host-b");
}

}  // namespace
}  // namespace fsdpd::server
