// The worker's outbox: what survives a lost session, in which order, what is dropped, and what
// waits for the coordinator to confirm it stored it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "tests/support/thread_state.h"
#include "worker/session_outbox.h"

namespace fsdpd {
namespace {

v1::WorkerMessage Step(const std::string& job_id, int64_t step) {
  v1::WorkerMessage message;
  message.mutable_step()->set_job_id(job_id);
  message.mutable_step()->set_step(step);
  return message;
}

FinishedAttempt Result(const std::string& job_id, int attempt) {
  FinishedAttempt finished;
  finished.result.set_job_id(job_id);
  finished.result.set_attempt(attempt);
  finished.result.set_ok(true);
  return finished;
}

TEST(WorkerOutboxTest, KeepsTheNewestReportsAndCountsTheDropped) {
  Outbox outbox(3);
  for (int64_t step = 1; step <= 5; ++step) outbox.PushTelemetry(Step("job-1", step));
  Outbox::Dropped dropped = outbox.TakeDropped();
  EXPECT_EQ(dropped.count, 2);
  EXPECT_EQ(dropped.job_id, "job-1");
  EXPECT_EQ(outbox.TakeDropped().count, 0) << "the count resets once taken";
  for (int64_t expected = 3; expected <= 5; ++expected) {
    std::optional<v1::WorkerMessage> front = outbox.FrontTelemetry();
    ASSERT_TRUE(front.has_value());
    EXPECT_EQ(front->step().step(), expected);
    outbox.PopTelemetry();
  }
  EXPECT_FALSE(outbox.FrontTelemetry().has_value());
  EXPECT_TRUE(outbox.Empty());
}

v1::ReportsStored Stored(const std::string& job_id, int attempt, int64_t through_step) {
  v1::ReportsStored stored;
  stored.set_job_id(job_id);
  stored.set_attempt(attempt);
  stored.set_through_step(through_step);
  return stored;
}

// Drains the queue as the session's writer does, returning the steps sent.
std::vector<int64_t> SendAll(Outbox& outbox) {
  std::vector<int64_t> sent;
  while (std::optional<v1::WorkerMessage> front = outbox.FrontTelemetry()) {
    sent.push_back(front->has_step() ? front->step().step() : -1);
    outbox.PopTelemetry();
  }
  return sent;
}

TEST(WorkerOutboxTest, SentReportsWaitForTheCoordinatorToStoreThem) {
  Outbox outbox(100);
  for (int64_t step = 1; step <= 4; ++step) outbox.PushTelemetry(Step("job-1", step));
  v1::WorkerMessage unnumbered;
  unnumbered.mutable_log()->set_job_id("job-1");
  outbox.PushTelemetry(unnumbered);
  v1::WorkerMessage numbered = unnumbered;
  numbered.mutable_log()->set_sequence(7);
  outbox.PushTelemetry(numbered);
  EXPECT_EQ(SendAll(outbox), (std::vector<int64_t>{1, 2, 3, 4, -1, -1}));
  EXPECT_EQ(outbox.UnconfirmedCount(), 5u) << "step reports and numbered lines wait; others not";

  // Only the stored ones of that job and attempt are forgotten.
  outbox.ConfirmStored(Stored("job-1", 0, 2));
  outbox.ConfirmStored(Stored("job-1", 5, 4));
  outbox.ConfirmStored(Stored("job-2", 0, 4));
  EXPECT_EQ(outbox.UnconfirmedCount(), 3u);
  v1::ReportsStored lines = Stored("job-1", 0, 0);
  lines.set_through_log_sequence(6);
  outbox.ConfirmStored(lines);
  EXPECT_EQ(outbox.UnconfirmedCount(), 3u) << "line 7 is not stored yet";

  // A new session sends the rest first, in order, before what was queued meanwhile.
  outbox.PushTelemetry(Step("job-1", 5));
  outbox.RequeueUnconfirmed();
  EXPECT_EQ(outbox.UnconfirmedCount(), 0u);
  EXPECT_EQ(SendAll(outbox), (std::vector<int64_t>{3, 4, -1, 5}));
  lines.set_through_log_sequence(7);
  outbox.ConfirmStored(lines);
  outbox.ConfirmStored(Stored("job-1", 0, 5));
  EXPECT_EQ(outbox.UnconfirmedCount(), 0u);
  outbox.RequeueUnconfirmed();
  EXPECT_TRUE(outbox.Empty());
}

v1::WorkerMessage Checkpoint(const std::string& job_id, int attempt, int64_t step) {
  v1::WorkerMessage message;
  message.mutable_checkpoint()->set_job_id(job_id);
  message.mutable_checkpoint()->set_attempt(attempt);
  message.mutable_checkpoint()->set_step(step);
  return message;
}

// Rank 0's committed checkpoints are listed by the coordinator: each is kept until it is
// confirmed as stored, sent again on a new session, and never dropped for room.
TEST(WorkerOutboxTest, CommittedCheckpointsWaitForTheCoordinatorAndAreNeverDropped) {
  Outbox outbox(3);
  outbox.PushTelemetry(Checkpoint("job-1", 1, 10));
  for (int64_t step = 11; step <= 15; ++step) outbox.PushTelemetry(Step("job-1", step));
  EXPECT_EQ(outbox.TakeDropped().count, 3);
  EXPECT_EQ(SendAll(outbox), (std::vector<int64_t>{-1, 14, 15})) << "the checkpoint is kept";
  EXPECT_EQ(outbox.UnconfirmedCount(), 3u);

  // A step confirmation, another attempt's or a lower checkpoint's: it waits on.
  outbox.ConfirmStored(Stored("job-1", 0, 15));
  v1::ReportsStored stored = Stored("job-1", 1, 15);
  outbox.ConfirmStored(stored);
  stored.set_through_checkpoint_step(10);
  stored.set_attempt(2);
  outbox.ConfirmStored(stored);
  stored.set_attempt(1);
  stored.set_through_checkpoint_step(9);
  outbox.ConfirmStored(stored);
  EXPECT_EQ(outbox.UnconfirmedCount(), 1u);
  outbox.RequeueUnconfirmed();
  std::optional<v1::WorkerMessage> resent = outbox.FrontTelemetry();
  ASSERT_TRUE(resent.has_value() && resent->has_checkpoint());
  EXPECT_EQ(resent->checkpoint().step(), 10);
  SendAll(outbox);
  stored.set_through_checkpoint_step(10);
  outbox.ConfirmStored(stored);
  EXPECT_EQ(outbox.UnconfirmedCount(), 0u);
}

TEST(WorkerOutboxTest, UnconfirmedReportsAreBoundedByTheCapacity) {
  Outbox outbox(3);
  for (int64_t step = 1; step <= 5; ++step) {
    outbox.PushTelemetry(Step("job-1", step));
    SendAll(outbox);
  }
  EXPECT_EQ(outbox.UnconfirmedCount(), 3u);
  outbox.RequeueUnconfirmed();
  EXPECT_EQ(SendAll(outbox), (std::vector<int64_t>{3, 4, 5})) << "the newest are kept";
}

TEST(WorkerOutboxTest, AResultWaitsForTheReportsQueuedBeforeIt) {
  Outbox outbox(10);
  outbox.PushTelemetry(Step("job-1", 7));
  outbox.PushFinished(Result("job-1", 2));
  EXPECT_FALSE(outbox.FrontFinished().has_value());
  // Registration still learns about the pending result, so the rank is not taken for lost.
  std::optional<v1::AttemptResult> unsent = outbox.OldestUnsentResult();
  ASSERT_TRUE(unsent.has_value());
  EXPECT_EQ(unsent->job_id(), "job-1");
  EXPECT_EQ(unsent->attempt(), 2);

  outbox.PopTelemetry();
  std::optional<FinishedAttempt> finished = outbox.FrontFinished();
  ASSERT_TRUE(finished.has_value());
  EXPECT_EQ(finished->result.attempt(), 2);
  EXPECT_FALSE(outbox.Empty()) << "a peeked result stays until it was sent";
  outbox.PopFinished();
  EXPECT_TRUE(outbox.Empty());
  EXPECT_FALSE(outbox.OldestUnsentResult().has_value());
}

TEST(WorkerOutboxTest, ResultsAreNeverDroppedWhenTelemetryOverflows) {
  Outbox outbox(2);
  outbox.PushFinished(Result("job-1", 1));
  for (int64_t step = 1; step <= 10; ++step) outbox.PushTelemetry(Step("job-2", step));
  EXPECT_EQ(outbox.TakeDropped().count, 8);
  ASSERT_TRUE(outbox.OldestUnsentResult().has_value());
  EXPECT_EQ(outbox.OldestUnsentResult()->job_id(), "job-1");
}

TEST(WorkerOutboxTest, ProfileTracesOutliveStepReportsWhenFull) {
  Outbox outbox(2);
  v1::WorkerMessage profile;
  profile.mutable_profile()->set_job_id("job-1");
  profile.mutable_profile()->set_trace_chunk_index(0);
  outbox.PushTelemetry(profile);
  outbox.PushTelemetry(Step("job-1", 1));
  outbox.PushTelemetry(Step("job-1", 2));  // full: step 1 goes, the trace chunk stays
  EXPECT_EQ(outbox.TakeDropped().count, 1);
  std::optional<v1::WorkerMessage> front = outbox.FrontTelemetry();
  ASSERT_TRUE(front.has_value());
  EXPECT_TRUE(front->has_profile());
  outbox.PopTelemetry();
  front = outbox.FrontTelemetry();
  ASSERT_TRUE(front.has_value());
  EXPECT_EQ(front->step().step(), 2);
}

TEST(WorkerOutboxTest, AnEmptyWaitLastsUntilItsDeadline) {
  Outbox outbox(10);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  outbox.WaitForWork(until);
  EXPECT_GE(std::chrono::steady_clock::now(), until) << "nothing queued and nobody woke it";
}

// Runs WaitForWork(far, hold_steps) on a thread of its own, and `act` once that thread is blocked
// in it. Returns what the waiter saw when its wait returned: whether telemetry was queued, and
// whether it returned before the deadline.
struct WaitOutcome {
  bool work_queued = false;
  bool before_deadline = false;
};
WaitOutcome WaitThenAct(Outbox& outbox, const std::function<void()>& act, bool hold_steps = false) {
  const auto far = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::atomic<pid_t> waiter_tid{0};
  WaitOutcome outcome;
  std::thread waiter([&] {
    waiter_tid = testing::CurrentThreadId();
    outbox.WaitForWork(far, hold_steps);
    outcome.before_deadline = std::chrono::steady_clock::now() < far;
    outcome.work_queued = outbox.FrontTelemetry().has_value();
  });
  while (waiter_tid.load() == 0) std::this_thread::yield();
  // Blocked in the wait: the producer acts only once the waiter is asleep in WaitForWork. A wait
  // that returns at once is seen here as the thread having exited (false), and it found nothing.
  const bool blocked = testing::WaitUntilBlocked(waiter_tid.load(), std::chrono::seconds(10));
  act();
  waiter.join();
  EXPECT_TRUE(blocked) << "WaitForWork returned before anything was queued";
  return outcome;
}

TEST(WorkerOutboxTest, AWaitReturnsBecauseWorkArrived) {
  Outbox outbox(10);
  const WaitOutcome outcome = WaitThenAct(outbox, [&] { outbox.PushTelemetry(Step("job-1", 1)); });
  EXPECT_TRUE(outcome.work_queued) << "the wait returned before the work was queued";
  EXPECT_TRUE(outcome.before_deadline) << "queued work did not end the wait";
}

TEST(WorkerOutboxTest, AFinishedAttemptEndsAWaitToo) {
  Outbox outbox(10);
  const WaitOutcome outcome = WaitThenAct(outbox, [&] { outbox.PushFinished(Result("job-1", 1)); });
  EXPECT_TRUE(outcome.before_deadline) << "a queued result did not end the wait";
  EXPECT_TRUE(outbox.FrontFinished().has_value());
}

TEST(WorkerOutboxTest, WakeEndsAWaitWithNothingQueued) {
  Outbox outbox(10);
  const WaitOutcome outcome = WaitThenAct(outbox, [&] { outbox.Wake(); });
  EXPECT_TRUE(outcome.before_deadline) << "Wake() did not end the wait";
  EXPECT_FALSE(outcome.work_queued);
  // The wake is consumed: the next wait lasts until its deadline again.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  outbox.WaitForWork(until);
  EXPECT_GE(std::chrono::steady_clock::now(), until);
}

// While the coordinator paces the worker, step reports wait for the next heartbeat: a wait does
// not end for them (it would spin), but other work still ends it.
TEST(WorkerOutboxTest, PacedStepReportsDoNotEndAWaitButOtherWorkDoes) {
  Outbox outbox(10);
  outbox.PushTelemetry(Step("job-1", 1));
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  outbox.WaitForWork(until, /*hold_steps=*/true);
  EXPECT_GE(std::chrono::steady_clock::now(), until) << "a held step report ended the wait";
  const WaitOutcome outcome = WaitThenAct(
      outbox, [&] { outbox.PushFinished(Result("job-1", 1)); }, /*hold_steps=*/true);
  EXPECT_TRUE(outcome.before_deadline) << "a result behind held steps did not end the wait";
  EXPECT_TRUE(outbox.HasFinished());
}

// A paced heartbeat takes the step reports at the front of the queue, oldest first and at most
// as many as asked, and stops at anything else; taken reports wait for their confirmation and
// go again on a new session, like sent ones.
TEST(WorkerOutboxTest, AHeartbeatTakesTheLeadingStepReportsWhichWaitForConfirmation) {
  Outbox outbox(100);
  for (int64_t step = 1; step <= 3; ++step) outbox.PushTelemetry(Step("job-1", step));
  v1::WorkerMessage line;
  line.mutable_log()->set_job_id("job-1");
  outbox.PushTelemetry(line);
  outbox.PushTelemetry(Step("job-1", 4));

  std::vector<v1::StepReport> taken = outbox.TakeLeadingSteps(2);
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].step(), 1);
  EXPECT_EQ(taken[1].step(), 2);
  taken = outbox.TakeLeadingSteps(10);
  ASSERT_EQ(taken.size(), 1u) << "the log line behind step 3 keeps its place";
  EXPECT_EQ(taken[0].step(), 3);
  EXPECT_TRUE(outbox.TakeLeadingSteps(10).empty());
  EXPECT_TRUE(outbox.FrontTelemetry()->has_log());
  EXPECT_EQ(outbox.UnconfirmedCount(), 3u);

  // The session broke before the coordinator stored them: they go first on the next one.
  outbox.ConfirmStored(Stored("job-1", 0, 1));
  outbox.RequeueUnconfirmed();
  EXPECT_EQ(SendAll(outbox), (std::vector<int64_t>{2, 3, -1, 4}));
}

}  // namespace
}  // namespace fsdpd
