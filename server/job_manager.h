// The job state machine and the assignment flow. Owns no threads: gRPC services call it with
// what clients and workers send, and the coordinator calls Tick() periodically for timeouts.
//
//   PENDING ─▶ SCHEDULED ─▶ RUNNING ─▶ SUCCEEDED | FAILED | CANCELLED
//      ▲           │           │
//      └─ RETRYING ◀───────────┘   (an attempt failed and attempt <= max_restarts)
//
// A job becomes SCHEDULED when its gang is placed and its assignments are stored, and RUNNING
// on the first StepReport of that attempt. Every transition is stored with a time and a reason.
//
// The definitions live in files named by concern: job_manager.cc (construction, loading the
// stored jobs, shutdown), _submission.cc (the spec check, Submit, Cancel), _scheduling.cc
// (placing gangs, starting attempts), _transitions.cc (state changes, ending attempts),
// _deadlines.cc (Tick), _liveness.cc (lost workers, suspended under overload), _workers.cc
// (registration, sessions, message dispatch), _reports.cc (steps, results, logs, artifacts,
// profiles), _exports.cc (checkpoints and their exports), _queries.cc (the published view,
// watches, logs), _sending.cc (grouped writes, rollback, and what is held for workers and
// subscribers until the commit) and _store_health.cc (a store that cannot write, held messages).
// The private declarations below are grouped the same way.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "fsdpd/v1/jobs.pb.h"
#include "fsdpd/v1/worker.pb.h"
#include "proto/spec/job_spec.h"
#include "server/artifact_store.h"
#include "server/auth.h"
#include "server/config.h"
#include "server/job_store.h"
#include "server/processing_lag.h"
#include "server/profile_store.h"
#include "server/rendezvous_store.h"
#include "server/report_pacer.h"
#include "server/worker_registry.h"

namespace fsdpd::server {

// The actor of the state changes the coordinator decides itself (StateChange.actor).
inline constexpr char kCoordinatorActor[] = "fsdpd";
// The reasons of a new job's first state change, and of a held job's once the fleet could run it.
inline constexpr char kSubmittedReason[] = "submitted";
inline constexpr char kFleetCanRunReason[] = "the fleet can run it now; waiting for workers";

// A WatchJob or GetJobLogs stream. Called under the job manager's lock: must not block.
class JobSubscriber {
 public:
  virtual ~JobSubscriber() = default;
  virtual void OnEvent(const v1::JobEvent& event) = 0;
  virtual void OnLog(const v1::LogLine& line) = 0;
  // The job ended (OK) or the coordinator is shutting down (UNAVAILABLE).
  virtual void OnEnd(const absl::Status& status) = 0;
};

// Receives training figures (the metrics exporter). Called under the job manager's lock.
class JobObserver {
 public:
  virtual ~JobObserver() = default;
  virtual void OnRankStep(const v1::StepReport& report, const v1::Worker& worker) = 0;
  virtual void OnAggregateStep(const v1::StepReport& aggregate) = 0;
  virtual void OnJobFinished(const std::string& job_id) = 0;
  virtual void OnProfile(const v1::ProfileReport& report) = 0;
};

// What a submission carries besides its spec (SubmitJobRequest.labels and .origin).
struct SubmitDetails {
  std::map<std::string, std::string> labels;
  // weights_from.step 0 is resolved to the newest complete checkpoint by Submit.
  v1::JobOrigin origin;
};

class JobManager {
 public:
  using Clock = std::chrono::steady_clock;

  JobManager(JobManagerConfig config, JobStore& store, WorkerRegistry& workers,
             RendezvousStore& rendezvous, std::function<Clock::time_point()> now = Clock::now);

  // Loads the stored jobs. Attempts that were SCHEDULED or RUNNING wait up to the heartbeat
  // timeout for their workers to register again before they fail.
  absl::Status Load();

  // Field errors of the spec, including the coordinator's own limits (world size, memory, the
  // submitting role's --max-priority). The one check of a spec: Submit runs it once per
  // submission; a dry run calls it alone. `role` is the caller's (auth.h; kAdmin without
  // authentication).
  std::vector<FieldError> CheckSpec(const v1::JobSpec& spec, Role role = Role::kAdmin) const;
  // The new job's id, or INVALID_ARGUMENT naming each bad field of CheckSpec, whose errors are
  // then also put in `field_errors` when it is given (the job service answers them as
  // google.rpc.BadRequest violations). `owner` is the submitter's principal (auth.h; "" without
  // authentication): stored as Job.owner and as the actor of the first transition.
  // `details`: labels (job_labels.h rules) and origin. origin.weights_from must name a job
  // that exists, with the same model section, and one of its complete checkpoints (step 0: the
  // newest), and the spec may not set checkpoint.init_from with it; Submit stores the resolved
  // step and sets the stored spec's checkpoint.init_from_job_uid / init_from_step. Each error is
  // INVALID_ARGUMENT naming its field.
  absl::StatusOr<std::string> Submit(const v1::JobSpec& spec, const std::string& owner = "",
                                     std::vector<FieldError>* field_errors = nullptr,
                                     Role role = Role::kAdmin, const SubmitDetails& details = {});
  absl::StatusOr<v1::Job> Get(const std::string& job_id) const;
  std::vector<v1::Job> List(const std::vector<v1::JobState>& states, int limit) const;
  // The jobs in `states` (all if empty), each with only its id, state, creation time and
  // labels: what ListJobs filters and pages on before it copies the jobs of its page (Get).
  // Copying every job whole, with its attempts' rank lists, was most of a listing of 2,000
  // jobs (bench/RESULTS.md, "Heartbeat acks").
  std::vector<v1::Job> ListHeaders(const std::vector<v1::JobState>& states) const;
  // `actor` is recorded on the CANCELLED transition (StateChange.actor).
  absl::StatusOr<v1::Job> Cancel(const std::string& job_id, const std::string& reason,
                                 const std::string& actor = kCoordinatorActor);
  std::map<v1::JobState, int> CountByState() const;
  // Asks every rank of the job's running attempt to profile a window.
  absl::Status StartProfile(const v1::ProfileRequest& request);

  // Checkpoints and their exports (job_manager_exports.cc).
  // The job's complete checkpoints, newest first; NOT_FOUND for an unknown job.
  absl::StatusOr<std::vector<CheckpointRecord>> ListCheckpoints(const std::string& job_id) const;
  // Resolves `step` (0: a SUCCEEDED job's final model, else its newest checkpoint) and says
  // whether its export is READY, being PREPARED (on which worker, or what it waits for), or
  // FAILED (said once; the next call tries again). A step the job has no checkpoint of is
  // NOT_FOUND naming the steps it has.
  absl::StatusOr<v1::ExportStatus> PrepareExport(const std::string& job_id, int64_t step);
  // The file ExportJob streams for a checkpoint's step (> 0): FAILED_PRECONDITION while it is
  // not prepared, NOT_FOUND when the job has no checkpoint of that step.
  absl::StatusOr<std::string> CheckpointExportPath(const std::string& job_id, int64_t step);

  // Returns the stored history; subscribes for what follows unless the job already ended
  // (then `ended` is true and the subscriber is not kept).
  struct History {
    std::vector<v1::JobEvent> events;
    std::vector<v1::LogLine> logs;
    bool ended = false;
  };
  absl::StatusOr<History> Watch(const std::string& job_id,
                                const std::shared_ptr<JobSubscriber>& subscriber);
  absl::StatusOr<History> Logs(const std::string& job_id, int64_t tail,
                               const std::shared_ptr<JobSubscriber>& subscriber);
  void Unsubscribe(const std::string& job_id, const JobSubscriber* subscriber);

  // Worker side.
  // `principal` is the caller's credential (auth.h); worker ids are bound to it.
  absl::StatusOr<v1::RegisterResponse> RegisterWorker(const v1::RegisterRequest& request,
                                                      const std::string& principal = "");
  absl::Status OpenSession(const std::string& worker_id, std::shared_ptr<WorkerSession> session,
                           const std::string& principal = "");
  void CloseSession(const std::string& worker_id, const WorkerSession* session);
  // Stamps the worker alive, then handles the message.
  void OnWorkerMessage(const std::string& worker_id, const v1::WorkerMessage& message);
  // Stamps liveness without the job manager's lock: called when a message is received, before
  // it waits in a queue, so a coordinator that falls behind gets slower instead of declaring
  // streaming workers lost.
  void NoteAlive(const std::string& worker_id);
  // A run of session messages (in arrival order, each already stamped by NoteAlive) under one
  // hold of the lock, their store writes grouped into one transaction that is committed before
  // this returns and before readers see what the run changed.
  struct WorkerMessageRef {
    const std::string* worker_id;
    const v1::WorkerMessage* message;
  };
  void OnWorkerMessages(const std::vector<WorkerMessageRef>& messages);
  // Backpressure from the store: waits, without the job manager's lock, while the store's writer
  // is more than kMaxQueuedStoreRows rows behind (at most 5 s, and not while the store fails).
  // The session dispatcher calls it before each run, so that reports wait at the workers, and
  // count as processing lag, instead of piling up in memory ahead of the store.
  void WaitForStoreToCatchUp();
  static constexpr int64_t kMaxQueuedStoreRows = 50000;

  // Expires silent workers and unrecovered attempts, then schedules. While the store cannot
  // write, only retries what is held (see StoreHealth).
  void Tick();
  // A scheduling pass alone (what Tick ends with).
  void SchedulePass();
  // From then on Submit asks for its scheduling pass through `wake` (the coordinator's ticker
  // runs SchedulePass at once, one pass for the submissions that came meanwhile) instead of running
  // it under the lock before it answers: the pass scans the fleet, which on 10,000 workers was
  // most of a submission's time (bench/RESULTS.md, "Backpressure"). Without it (the unit tests)
  // Submit schedules in place, and its reply shows the placement.
  void SetSchedulingWaker(std::function<void()> wake);

  // Whether the store takes writes. After a failed write the coordinator applies nothing it
  // could not store: the run of worker messages whose commit failed is undone in memory and
  // held with everything that arrives after it (their workers keep the reports unconfirmed),
  // submits and cancels get UNAVAILABLE, and Tick retries the held messages in order until
  // they commit. See docs/operations.md.
  struct StoreHealth {
    bool writable = true;
    int64_t errors = 0;      // failed store writes since start
    std::string last_error;  // of the latest failure
    int64_t held_messages = 0;
  };
  StoreHealth GetStoreHealth() const;
  // Whether the coordinator decides lost workers now (job_manager_liveness.cc,
  // docs/operations.md "Overload").
  struct LivenessHealth {
    bool suspended = false;   // lost-worker decisions are suspended
    std::string reason;       // why, while suspended
    int64_t lag_millis = 0;   // the processing lag at the latest tick
    int held_workers = 0;     // silent workers kept by the mass-silence rule
    int64_t suspensions = 0;  // times decisions were suspended since start
    // Backpressure (report_pacer.h): the interval workers are told to beat and report at
    // (0: unpaced), and the times pacing started since start.
    int64_t paced_interval_millis = 0;
    int64_t pacings = 0;
  };
  LivenessHealth GetLivenessHealth() const;
  // Fed by the session dispatcher and the ticker, read on every tick (processing_lag.h).
  ProcessingLag& processing_lag() { return lag_; }
  // The session's reads stopped (or resumed) because its messages wait for the job manager:
  // the worker is not silent by its own doing. Without the job manager's lock.
  void NoteReadPaused(const std::string& worker_id, bool paused);
  // Ends every subscriber stream and closes worker sessions; jobs keep their state.
  void Shutdown();

  void SetObserver(JobObserver* observer);
  ArtifactStore& artifacts() { return artifacts_; }
  const WorkerRegistryConfig& worker_config() const { return workers_.config(); }
  ProfileStore& profiles() { return profiles_; }

 private:
  // One step's reports until every rank has sent it.
  struct StepAccumulator {
    int reported = 0;
    std::vector<bool> ranks;
    v1::StepReport rank_zero;
    double tokens_per_second = 0;
    double mfu_sum = 0;
    double step_seconds = 0;
    int64_t memory_peak_bytes = 0;
    int64_t memory_current_bytes = 0;
    int64_t memory_reserved_bytes = 0;
  };
  struct ActiveAttempt {
    int attempt = 0;
    std::vector<std::string> worker_ids;  // by rank
    std::vector<bool> finished;
    // After a coordinator restart: which ranks have registered again, and until when.
    std::vector<bool> reattached;
    std::optional<Clock::time_point> recovery_deadline;
    std::map<int64_t, StepAccumulator> steps;
    // Reports at or below this step are stored but not aggregated again: workers resend what
    // they buffered while the coordinator was away.
    int64_t last_aggregated_step = 0;
    // Each rank's latest step report and numbered log line seen by this coordinator; one at or
    // below it is a resend, which is stored again (idempotent) but not counted or forwarded again.
    std::vector<int64_t> last_reported_step;
    std::vector<int64_t> last_log_sequence;
    // Which ranks accepted their assignment (or reported), and the SCHEDULED deadline: every
    // rank must accept by it, and the attempt must show progress (an acceptance or a rank's log
    // line, each of which moves it StartTimeout() on) until its first step. Unset once RUNNING,
    // and after a coordinator restart.
    std::vector<bool> accepted;
    std::optional<Clock::time_point> start_deadline;
    // Each rank's latest progress before the first step, and when (empty until the first).
    std::vector<std::string> progress;
    std::vector<Clock::time_point> progressed_at;
  };
  // A step report or numbered log line handled but not yet confirmed to its worker: it is stored
  // once the store's StoredStepReports() or StoredLogs() reaches `number` (0: nothing to store,
  // it was ignored).
  struct UnconfirmedReport {
    bool log = false;
    int64_t number = 0;
    std::string job_id;
    int attempt = 0;
    int64_t position = 0;  // the step, or the log line's sequence
  };
  struct JobRecord {
    v1::Job job;
    int64_t submit_order = 0;
    int64_t next_sequence = 1;
    std::optional<ActiveAttempt> active;
    std::vector<std::shared_ptr<JobSubscriber>> subscribers;
    // Log text accepted for storing (from the store at load, then counted as lines arrive;
    // a resent copy counts again, so the bound is reached early rather than late).
    int64_t log_bytes = 0;
    bool log_limit_noted = false;  // the marker line was stored by this process
    // When its current attempt started, in this process's order (0: before a restart): the
    // most recently started backfilled job is preempted first.
    int64_t start_order = 0;
    // When its held reason was last stored by this process: a changed reason (the fleet grew)
    // is stored again at most once a heartbeat timeout.
    std::optional<Clock::time_point> held_noted_at;
  };

  // job_manager.cc: lookups and helpers every part uses.
  // The wall-clock time stored on jobs, attempts and transitions.
  static int64_t UnixMillisNow();
  // The number at the end of a job id ("job-000042": 42), the order of submission.
  static int64_t SubmitOrderOf(const std::string& job_id);
  JobRecord* FindLocked(const std::string& job_id);
  const JobRecord* FindLocked(const std::string& job_id) const;

  // job_manager_scheduling.cc
  // What one rank of the spec needs (EstimateRankDeviceBytes): admission and placement use it.
  static int64_t RankMemoryBytes(const v1::JobSpec& spec);
  // Every worker the registry knows, as the scheduler sees them.
  const std::vector<FleetWorker>& FleetLocked();
  void ScheduleLocked();
  // `ahead_of`: the waiting head job this one starts ahead of (backfill), or "".
  void StartAttemptLocked(JobRecord& record, const std::vector<std::string>& worker_ids,
                          const std::string& ahead_of = "");
  // The reason of the job's latest transition ("" without one).
  static std::string LastTransitionReason(const v1::Job& job);
  // What a waiting job's reason shows: `why` it waits (the scheduler's WaitReason), after what
  // its last state change said when that says more than that it was submitted or held (why it
  // is retrying, that it was preempted, ...).
  static std::string WaitingReason(const v1::Job& job, const std::string& why);
  // Publishes why a waiting job waits (not stored: recomputed on every pass).
  void SetWaitReasonLocked(JobRecord& record, const std::string& reason);
  // Appends the attempt now starting to Job.attempts (its ranks' workers and hosts).
  void RecordAttemptStartLocked(v1::Job& job, const std::vector<std::string>& worker_ids);

  // job_manager_transitions.cc
  void TransitionLocked(JobRecord& record, v1::JobState state, const std::string& reason,
                        const std::string& actor = kCoordinatorActor);
  // Cancels the ranks that have not reported, frees the rendezvous scope and stores the end
  // (also in Job.attempts: its end, outcome and final step; the job's row is written by the
  // transition that follows).
  void EndAttemptLocked(JobRecord& record, bool ok, const std::string& reason);
  // Retries while the failed attempts (preemptions do not count) are at most max_restarts.
  void FailAttemptLocked(JobRecord& record, const std::string& reason);
  // Ends a backfilled job's attempt so that `for_job_id` gets its workers: back to PENDING,
  // no restart spent.
  void PreemptLocked(JobRecord& record, const std::string& for_job_id);
  // A restarted worker says the OOM killer ended its previous process during an attempt
  // (RegisterRequest.previous_oom_kill). Believed only for the rank the coordinator had
  // assigned to it: the worker's admitted memory is lowered below what that job needs, and the
  // attempt, if still active, fails saying so. Called before the registration is reconciled.
  void NoteOomKillLocked(const std::string& worker_id, const RankAssignment& previous,
                         const v1::RegisterRequest& request);

  // job_manager_liveness.cc
  // Marks silent workers LOST and fails their attempts, unless the coordinator's own lag or a
  // mass silence says their silence is no evidence; says so on a change.
  void ExpireSilentWorkersLocked(std::chrono::milliseconds lag);
  // Paces the workers' step reports by this tick's lag (report_pacer.h); logs a change.
  void PaceReportsLocked(std::chrono::milliseconds lag);
  void SetLivenessLocked(bool suspended, const std::string& reason, int64_t lag_millis,
                         int held_workers);

  // job_manager_deadlines.cc
  void TickLocked();
  void FailAttemptsOnLostWorkersLocked();
  // Fails attempts whose ranks did not all accept, or that showed no progress, before the
  // SCHEDULED deadline, naming the rank and the step it was last seen in.
  void ExpireUnstartedAttemptsLocked();
  std::chrono::milliseconds StartTimeout() const;
  // A rank of a SCHEDULED attempt showed progress (`what`): the deadline moves on.
  void NoteProgressLocked(JobRecord& record, int rank, const std::string& what);
  // A log line of a rank of its active attempt is progress (the trainer logs each step that may
  // block before it starts it).
  void NoteLogProgressLocked(const std::string& worker_id, const v1::LogLine& line);

  // job_manager_health.cc
  // Records the health a worker reported in a heartbeat, logging a change.
  void OnWorkerHealthLocked(const std::string& worker_id, const v1::WorkerHealth& health);

  // job_manager_submission.cc
  // Checks details.origin against the stored jobs and their recorded checkpoints; on success
  // `origin` is what to store (weights_from's step resolved) and the spec's
  // checkpoint.init_from_job_uid / init_from_step are set.
  std::vector<FieldError> ResolveOriginLocked(const SubmitDetails& details, v1::JobSpec* spec,
                                              v1::JobOrigin* origin) const;

  // job_manager_workers.cc
  // Weighs what a registering worker says it runs against what the coordinator assigned to it:
  // a rank it was assigned is confirmed (its standing kept), anything else is cancelled, and a
  // claim on work never assigned to this worker id is logged with `principal`.
  void ReconcileRegistrationLocked(const std::string& worker_id, const RankAssignment& previous,
                                   const v1::RegisterRequest& request,
                                   const std::string& principal);
  enum class ClaimStanding {
    kActive,      // the coordinator assigned that rank to this worker; the attempt is active
    kEnded,       // it was assigned to this worker, but the attempt has ended
    kUnassigned,  // no coordinator assigned it to this worker id
  };
  // `assigned_here`: the registry held this very assignment for the worker before it
  // registered again. Otherwise the stored assignments of the attempt decide.
  ClaimStanding ClaimStandingLocked(const std::string& worker_id, const RankAssignment& claim,
                                    bool assigned_here);
  void OnWorkerMessageLocked(const std::string& worker_id, const v1::WorkerMessage& message);
  // Applies a heartbeat's health and acknowledges it (with the stored reports and the pacing)
  // when the ack has something to say (NeedsAck); the step reports it carries are the caller's.
  void AnswerHeartbeatLocked(const std::string& worker_id, const v1::Heartbeat& heartbeat);
  // The active attempt this worker runs as the given job/attempt/rank, or null. A non-empty
  // `job_uid` must be the job's: a worker that outlived another coordinator may still send
  // reports of an older job with the same display id.
  JobRecord* ActiveRecordForLocked(const std::string& worker_id, const std::string& job_id,
                                   int attempt, int rank, const std::string& job_uid = "");
  void OnAcceptedLocked(const std::string& worker_id, const v1::AssignmentAccepted& accepted);

  // job_manager_reports.cc
  // `live`: the report also feeds the per-rank gauges (JobObserver::OnRankStep). A paced
  // heartbeat's reports feed them with their newest only: the gauges show the latest.
  void OnStepLocked(const std::string& worker_id, const v1::StepReport& report, bool live = true);
  void OnResultLocked(const std::string& worker_id, const v1::AttemptResult& result);
  void OnLogLocked(const std::string& worker_id, const v1::LogLine& line);
  void OnArtifactLocked(const std::string& worker_id, const v1::ArtifactChunk& chunk);
  void OnProfileLocked(const std::string& worker_id, const v1::ProfileReport& report);
  // Remembers a handled report or line until it is stored; ConfirmStoredLocked then tells its
  // worker.
  void NoteUnconfirmedLocked(const std::string& worker_id, UnconfirmedReport report);
  // Adds to `ack` the worker's reports that are stored now, one entry per (job, attempt).
  void ConfirmStoredLocked(const std::string& worker_id, v1::CoordinatorMessage* ack);

  // job_manager_exports.cc
  // One checkpoint export asked for by PrepareExport: waiting for a worker (worker_id empty),
  // consolidating on worker_id, or failed (failure set) until PrepareExport reports it.
  struct ExportTask {
    std::string job_id;
    int64_t step = 0;
    std::string worker_id;
    std::string failure;
  };
  // Rank 0 of the attempt that wrote it (active, or stored) reported a committed checkpoint.
  void OnCheckpointLocked(const std::string& worker_id, const v1::CheckpointCommitted& checkpoint);
  void OnExportResultLocked(const std::string& worker_id, const v1::ExportResult& result);
  // A chunk of attempt 0: a checkpoint's export from the worker consolidating it.
  void OnExportChunkLocked(const std::string& worker_id, const v1::ArtifactChunk& chunk);
  // Whether the worker consolidates a checkpoint now: the fleet shows it as taking no rank.
  bool ExportingLocked(const std::string& worker_id) const;
  // Sends the task to an idle worker on one of `hosts`; false when none is idle.
  bool DispatchExportLocked(const JobRecord& record, const CheckpointRecord& checkpoint,
                            ExportTask& task);
  // The hostnames of the workers that ran `attempt` of the record's job, sorted, each once.
  std::vector<std::string> AttemptHostsLocked(const JobRecord& record, int attempt);
  // A worker that registers again has lost any export it ran.
  void ForgetExportsOfLocked(const std::string& worker_id);

  // job_manager_queries.cc
  // Publishes the record's job for Get, List and CountByState, which read these snapshots
  // without taking mutex_ and so never wait behind the report stream. `progress_only`: only the
  // job's step, loss and throughput changed since it was last published (a completed step), so
  // the published copy is kept and only those are updated.
  void PublishLocked(const JobRecord& record, bool progress_only = false);

  // job_manager_sending.cc
  // Sends `message` to the worker now, or once the run's writes are committed.
  void SendLocked(const std::string& worker_id, const v1::CoordinatorMessage& message);
  void SendCancellation(const std::string& worker_id, const std::string& job_id, int attempt,
                        const std::string& reason);
  // Calls the record's subscribers with `notify` now or, while a run's writes are not yet
  // committed, once they are and its changes are published: a watcher never sees a state that
  // Get and the store do not have yet.
  void NotifyLocked(const JobRecord& record,
                    std::function<void(const std::shared_ptr<JobSubscriber>&)> notify);
  // Sends what NotifyLocked held back, in order.
  void SendHeldNotificationsLocked();
  // What a record was before a run of messages changed it, to undo a run that did not commit.
  struct RecordSnapshot {
    v1::Job job;
    int64_t next_sequence = 0;
    std::optional<ActiveAttempt> active;
  };
  // Saves the record as it is, once per run (only while a run's writes are grouped).
  void SnapshotLocked(const JobRecord& record);
  // What a step report that only counts toward its step changed, to undo it. Most reports of a
  // large gang are such: a full snapshot copies the job with its attempts' rank lists, which on
  // 1,000-rank jobs cost the dispatcher most of its time (bench/RESULTS.md, "At cluster scale").
  struct StepUndo {
    JobRecord* record = nullptr;
    int attempt = 0;
    int rank = 0;
    bool reattached = false;
    bool accepted = false;
    int64_t last_reported_step = 0;
    int64_t step = 0;
    std::optional<StepAccumulator> accumulator;  // none: the step had no accumulator yet
  };
  // Notes what the report is about to change, unless the record is snapshotted already (only
  // while a run's writes are grouped).
  void NoteStepUndoLocked(JobRecord& record, const v1::StepReport& report);
  // Puts every snapshotted record back, with its workers' assignments and rendezvous scope, then
  // undoes the step undo entries, newest first.
  void RollBackRunLocked();
  // Runs `body` with its writes in one store group; false (and nothing applied) when any of
  // them failed. Publishes, notifies and sends to workers only after the commit.
  bool RunGroupedLocked(const std::function<void()>& body);

  // job_manager_store_health.cc
  // Logs and counts a failed write, and marks the store failing.
  void LogStoreError(const absl::Status& status, const char* what);
  // UNAVAILABLE with the store's last error.
  absl::Status StoreUnavailable() const;
  // While the store is failing: retries what is held; true once it writes again.
  bool RecoverStoreLocked();
  // Keeps messages to handle once the store writes again.
  void HoldLocked(const std::vector<WorkerMessageRef>& messages);
  // Handles what was held, in order, when the store writes again; true when nothing is held.
  bool RetryHeldLocked();

  const JobManagerConfig config_;
  JobStore& store_;
  WorkerRegistry& workers_;
  RendezvousStore& rendezvous_;
  ArtifactStore artifacts_;
  ProfileStore profiles_;
  const std::function<Clock::time_point()> now_;
  const Clock::time_point started_at_ = now_();  // when this job manager was made

  mutable std::mutex mutex_;
  std::map<std::string, JobRecord> jobs_;
  // Cancellations for work a worker reported at registration that no longer counts; sent
  // when its session opens.
  std::map<std::string, v1::Cancellation> pending_cancellations_;
  // Per worker, in the order handled. Cleared when the worker is lost or registers again: its
  // new session resends whatever it still holds.
  std::map<std::string, std::deque<UnconfirmedReport>> unconfirmed_reports_;
  // Per worker, the pacing its last heartbeat ack carried, where not 0 (AnswerHeartbeatLocked).
  std::unordered_map<std::string, int64_t> told_pacing_;
  // FleetLocked's answer, and the registry's fleet it was copied from.
  std::vector<FleetWorker> fleet_view_;
  std::shared_ptr<const std::vector<FleetWorker>> fleet_base_;
  // Where AnswerHeartbeatLocked puts its acks while OnWorkerMessages holds the lock (null: it
  // sends them at once).
  std::vector<std::pair<std::string, v1::CoordinatorMessage>>* unsent_acks_ = nullptr;
  // FailAttemptsOnLostWorkersLocked's last full look: the fleet it saw, and whether any worker
  // in it was lost.
  std::shared_ptr<const std::vector<FleetWorker>> lost_checked_fleet_;
  bool fleet_has_lost_ = false;
  JobObserver* observer_ = nullptr;
  std::function<void()> wake_scheduler_;  // SetSchedulingWaker
  bool shutting_down_ = false;
  int64_t next_start_order_ = 1;

  // What readers see: the job as last stored, one immutable snapshot per job, in id order.
  // Taken after mutex_ when both are held; held only to swap or copy pointers.
  // While a run of messages is handled, what it changed is published only once its writes are
  // committed.
  bool deferring_publish_ = false;
  // Each record changed by the run, and whether more than its progress changed.
  std::map<const JobRecord*, bool> unpublished_;
  std::vector<std::function<void()>> held_notifications_;
  std::vector<std::pair<std::string, v1::CoordinatorMessage>> held_sends_;
  std::map<const JobRecord*, RecordSnapshot> snapshots_;
  std::vector<StepUndo> step_undos_;
  std::deque<std::pair<std::string, v1::WorkerMessage>> held_messages_;
  // Checkpoint exports in flight, one per (job, step).
  std::map<std::pair<std::string, int64_t>, ExportTask> exports_;
  std::atomic<bool> store_writable_{true};
  std::atomic<int64_t> store_errors_{0};
  std::atomic<int64_t> held_count_{0};
  bool run_failed_ = false;  // a write of the current group failed
  std::string store_error_;  // under view_mutex_
  ProcessingLag lag_;
  ReportPacer pacer_;
  // Silence counts from no earlier than this: when the processing lag last exceeded its bound.
  Clock::time_point heard_floor_{};
  bool mass_silence_holding_ = false;  // the last expiry held workers by the mass-silence rule
  mutable std::mutex liveness_mutex_;  // guards liveness_, read by GetLivenessHealth
  LivenessHealth liveness_;
  mutable std::mutex view_mutex_;
  // What readers see of one job: a copy of it as last published whole, and its progress since.
  // A completed step changes only the step, loss and throughput; publishing those alone spares
  // copying the job with its attempts' rank lists (a thousand ranks each on a large gang) on
  // every step, which took 40% of the session dispatcher's time at 10,000 workers
  // (bench/RESULTS.md, "Backpressure").
  struct PublishedJob {
    std::shared_ptr<const v1::Job> job;
    int64_t step = 0;
    double loss = 0;
    double tokens_per_second = 0;
    v1::Job Materialize() const;  // the copy with its progress
  };
  std::map<std::string, PublishedJob> view_;
  // The published jobs in `states` (all if empty), in id order, at most `limit` (0: all); taken
  // under view_mutex_, which it locks.
  std::vector<PublishedJob> PublishedIn(const std::vector<v1::JobState>& states, int limit) const;
};

bool IsTerminal(v1::JobState state);

}  // namespace fsdpd::server
