// Workers and their sessions: registration and reconciliation with what a worker still runs,
// opening and closing sessions, liveness, and the dispatch of each session message (heartbeats
// are answered here, accepted assignments noted; reports go to job_manager_reports.cc), with
// runs of messages grouped into one store transaction.
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "server/job_manager.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {
namespace {

// An idle fleet of 10,000 workers beats 10,000 times a second, and answering each beat was a
// write, a system call and a completion on every session (bench/RESULTS.md, "Heartbeat acks").
// A beat is answered when the answer says something: the first of a stream (it tells the pacing
// afresh; an unnumbered beat, from an older worker, counts as one), a beat that reports the
// worker unhealthy (a wedged worker waits for that ack to close), stored reports to confirm, a
// pacing the worker was not told, and every kAckEveryHeartbeats-th beat as a sign of life.
constexpr int64_t kAckEveryHeartbeats = 10;

bool NeedsAck(const v1::Heartbeat& heartbeat, bool confirms, bool pacing_changed) {
  return heartbeat.sequence() <= 1 || heartbeat.sequence() % kAckEveryHeartbeats == 0 ||
         !heartbeat.health().unhealthy().empty() || confirms || pacing_changed;
}

}  // namespace

absl::StatusOr<v1::RegisterResponse> JobManager::RegisterWorker(const v1::RegisterRequest& request,
                                                                const std::string& principal) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shutting_down_) return absl::UnavailableError("coordinator shutting down");
  absl::StatusOr<std::pair<std::string, RankAssignment>> registered =
      workers_.Register(request, now_(), principal);
  if (!registered.ok()) return registered.status();
  const auto& [worker_id, previous] = *registered;
  unconfirmed_reports_.erase(worker_id);
  told_pacing_.erase(worker_id);
  ForgetExportsOfLocked(worker_id);
  NoteOomKillLocked(worker_id, previous, request);
  spdlog::info("worker {} registered: {} {}:{} ({} MiB){}", worker_id, request.hostname(),
               request.device_kind(), request.gpu_index(), request.memory_bytes() >> 20,
               request.running_job_id().empty()
                   ? ""
                   : absl::StrCat(", says it runs ", request.running_job_id(), " attempt ",
                                  request.running_attempt(), " rank ", request.running_rank()));
  ReconcileRegistrationLocked(worker_id, previous, request, principal);
  v1::RegisterResponse response;
  response.set_worker_id(worker_id);
  response.set_heartbeat_interval_millis(workers_.config().heartbeat_interval.count());
  return response;
}

void JobManager::ReconcileRegistrationLocked(const std::string& worker_id,
                                             const RankAssignment& previous,
                                             const v1::RegisterRequest& request,
                                             const std::string& principal) {
  pending_cancellations_.erase(worker_id);
  const RankAssignment claim = {request.running_job_id(), request.running_attempt(),
                                request.running_rank()};
  const bool runs_previous = previous.active() && previous.job_id == claim.job_id &&
                             previous.attempt == claim.attempt && previous.rank == claim.rank;
  if (previous.active() && !runs_previous) {
    // The worker process restarted and no longer runs the rank we gave it.
    if (JobRecord* record =
            ActiveRecordForLocked(worker_id, previous.job_id, previous.attempt, previous.rank)) {
      FailAttemptLocked(
          *record, absl::StrCat("worker ", worker_id, " restarted and lost rank ", previous.rank));
    }
  }
  if (claim.job_id.empty()) return;
  const ClaimStanding standing = ClaimStandingLocked(worker_id, claim, runs_previous);
  if (standing != ClaimStanding::kUnassigned) workers_.ConfirmClaim(worker_id);
  if (standing == ClaimStanding::kActive) {
    FindLocked(claim.job_id)->active->reattached[claim.rank] = true;
    return;
  }
  // Work that no longer counts, or never did: stop it. The worker stays busy until it reports
  // the cancellation.
  v1::Cancellation cancellation;
  cancellation.set_job_id(claim.job_id);
  cancellation.set_attempt(claim.attempt);
  if (standing == ClaimStanding::kEnded) {
    cancellation.set_reason("the attempt is no longer active on the coordinator");
  } else {
    // Another worker's rank, a job that does not exist, or a stale id: the claim is kept only to
    // keep the worker off the scheduler until it reports that work ended.
    spdlog::warn(
        "worker {} (credential \"{}\") claims {} attempt {} rank {}, which the coordinator did not "
        "assign to it: the claim gives it no standing in that job, and it is told to cancel that "
        "work",
        worker_id, principal, claim.job_id, claim.attempt, claim.rank);
    cancellation.set_reason(absl::StrCat("the coordinator did not assign ", claim.job_id,
                                         " attempt ", claim.attempt, " rank ", claim.rank,
                                         " to worker ", worker_id));
  }
  pending_cancellations_[worker_id] = cancellation;
}

JobManager::ClaimStanding JobManager::ClaimStandingLocked(const std::string& worker_id,
                                                          const RankAssignment& claim,
                                                          bool assigned_here) {
  if (ActiveRecordForLocked(worker_id, claim.job_id, claim.attempt, claim.rank) != nullptr) {
    return ClaimStanding::kActive;
  }
  // This process assigned it and the attempt has ended since.
  if (assigned_here) return ClaimStanding::kEnded;
  // Or an earlier coordinator process did: the stored assignments say.
  if (FindLocked(claim.job_id) == nullptr) return ClaimStanding::kUnassigned;
  absl::StatusOr<std::vector<AssignmentRecord>> stored =
      store_.LoadAssignments(claim.job_id, claim.attempt);
  if (!stored.ok()) {
    spdlog::warn("cannot check worker {}'s claim on {} attempt {}: {}", worker_id, claim.job_id,
                 claim.attempt, stored.status().ToString());
    return ClaimStanding::kUnassigned;
  }
  for (const AssignmentRecord& assignment : *stored) {
    if (assignment.rank == claim.rank && assignment.worker_id == worker_id) {
      return ClaimStanding::kEnded;
    }
  }
  return ClaimStanding::kUnassigned;
}

absl::Status JobManager::OpenSession(const std::string& worker_id,
                                     std::shared_ptr<WorkerSession> session,
                                     const std::string& principal) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shutting_down_) return absl::UnavailableError("coordinator shutting down");
  // Only the credential the id is bound to may open its session, and only once the previous
  // session is provably dead (a takeover is refused).
  FSDPD_RETURN_IF_ERROR(workers_.CheckPrincipal(worker_id, principal));
  FSDPD_RETURN_IF_ERROR(workers_.AttachSession(worker_id, std::move(session), now_()));
  workers_.Heartbeat(worker_id, now_());
  if (auto pending = pending_cancellations_.find(worker_id);
      pending != pending_cancellations_.end()) {
    v1::CoordinatorMessage message;
    *message.mutable_cancellation() = pending->second;
    workers_.Send(worker_id, message);
    pending_cancellations_.erase(pending);
  }
  if (store_writable_.load()) RunGroupedLocked([this] { ScheduleLocked(); });
  return absl::OkStatus();
}

void JobManager::CloseSession(const std::string& worker_id, const WorkerSession* session) {
  // Nothing fails here: the worker may reconnect within the heartbeat timeout and keep its work.
  workers_.DetachSession(worker_id, session);
}

void JobManager::NoteAlive(const std::string& worker_id) { workers_.Heartbeat(worker_id, now_()); }

void JobManager::OnWorkerMessage(const std::string& worker_id, const v1::WorkerMessage& message) {
  NoteAlive(worker_id);
  OnWorkerMessages({{&worker_id, &message}});
}

void JobManager::OnWorkerMessages(const std::vector<WorkerMessageRef>& messages) {
  // Heartbeat acks go out once the lock is released: writing them to their sessions was most of
  // the time a run held it, which SubmitJob and the ticker waited for (bench/RESULTS.md,
  // "Heartbeat acks"). Only this caller sends acks, so theirs keep their order.
  std::vector<std::pair<std::string, v1::CoordinatorMessage>> acks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shutting_down_) return;
    unsent_acks_ = &acks;
    if (!store_writable_.load() || !held_messages_.empty()) {
      // Held behind what could not be stored, in order; heartbeats are still answered (the
      // reports they carry are held).
      for (const WorkerMessageRef& ref : messages) {
        if (ref.message->has_heartbeat()) {
          AnswerHeartbeatLocked(*ref.worker_id, ref.message->heartbeat());
        }
      }
      HoldLocked(messages);
    } else {
      const bool stored = RunGroupedLocked([&] {
        for (const WorkerMessageRef& ref : messages) {
          OnWorkerMessageLocked(*ref.worker_id, *ref.message);
        }
      });
      if (!stored) HoldLocked(messages);
    }
    unsent_acks_ = nullptr;
  }
  for (const auto& [worker_id, ack] : acks) workers_.Send(worker_id, ack);
}

void JobManager::OnWorkerMessageLocked(const std::string& worker_id,
                                       const v1::WorkerMessage& message) {
  switch (message.payload_case()) {
    case v1::WorkerMessage::kHeartbeat:
      // Reports paced into the heartbeat (report_pacer.h) count as if sent one by one, before it.
      for (int i = 0; i < message.heartbeat().steps_size(); ++i) {
        OnStepLocked(worker_id, message.heartbeat().steps(i),
                     /*live=*/i + 1 == message.heartbeat().steps_size());
      }
      AnswerHeartbeatLocked(worker_id, message.heartbeat());
      break;
    case v1::WorkerMessage::kStep:
      OnStepLocked(worker_id, message.step());
      break;
    case v1::WorkerMessage::kLog:
      NoteLogProgressLocked(worker_id, message.log());
      OnLogLocked(worker_id, message.log());
      break;
    case v1::WorkerMessage::kResult:
      OnResultLocked(worker_id, message.result());
      break;
    case v1::WorkerMessage::kArtifact:
      // Attempts count from 1: attempt 0 is a checkpoint's export.
      if (message.artifact().attempt() == 0) {
        OnExportChunkLocked(worker_id, message.artifact());
      } else {
        OnArtifactLocked(worker_id, message.artifact());
      }
      break;
    case v1::WorkerMessage::kProfile:
      OnProfileLocked(worker_id, message.profile());
      break;
    case v1::WorkerMessage::kAccepted:
      OnAcceptedLocked(worker_id, message.accepted());
      break;
    case v1::WorkerMessage::kCheckpoint:
      OnCheckpointLocked(worker_id, message.checkpoint());
      break;
    case v1::WorkerMessage::kExportResult:
      OnExportResultLocked(worker_id, message.export_result());
      break;
    case v1::WorkerMessage::PAYLOAD_NOT_SET:
      break;
  }
}

void JobManager::AnswerHeartbeatLocked(const std::string& worker_id,
                                       const v1::Heartbeat& heartbeat) {
  OnWorkerHealthLocked(worker_id, heartbeat.health());
  v1::CoordinatorMessage ack;
  ConfirmStoredLocked(worker_id, &ack);
  const int64_t paced = pacer_.interval().count();
  const auto told = told_pacing_.find(worker_id);
  const int64_t told_paced = told == told_pacing_.end() ? 0 : told->second;
  if (!NeedsAck(heartbeat, ack.reports_stored_size() > 0, paced != told_paced)) return;
  ack.mutable_heartbeat_ack()->set_unix_millis(absl::ToUnixMillis(absl::Now()));
  ack.mutable_heartbeat_ack()->set_sequence(heartbeat.sequence());
  ack.set_paced_interval_millis(paced);
  if (paced == 0) {
    if (told != told_pacing_.end()) told_pacing_.erase(told);
  } else {
    told_pacing_[worker_id] = paced;
  }
  if (unsent_acks_ != nullptr) {
    unsent_acks_->emplace_back(worker_id, std::move(ack));
  } else {
    workers_.Send(worker_id, ack);
  }
}

JobManager::JobRecord* JobManager::ActiveRecordForLocked(const std::string& worker_id,
                                                         const std::string& job_id, int attempt,
                                                         int rank, const std::string& job_uid) {
  JobRecord* record = FindLocked(job_id);
  if (record == nullptr || !record->active.has_value()) return nullptr;
  if (!job_uid.empty() && job_uid != record->job.uid()) return nullptr;
  const ActiveAttempt& active = *record->active;
  if (active.attempt != attempt || rank < 0 || rank >= static_cast<int>(active.worker_ids.size()) ||
      active.worker_ids[rank] != worker_id || active.finished[rank]) {
    return nullptr;
  }
  return record;
}

void JobManager::OnAcceptedLocked(const std::string& worker_id,
                                  const v1::AssignmentAccepted& accepted) {
  JobRecord* record = ActiveRecordForLocked(worker_id, accepted.job_id(), accepted.attempt(),
                                            accepted.rank(), accepted.job_uid());
  if (record == nullptr) return;  // an attempt that already ended
  SnapshotLocked(*record);
  record->active->accepted[accepted.rank()] = true;
  NoteProgressLocked(*record, accepted.rank(), "accepted its assignment");
  spdlog::info("{} attempt {}: rank {} accepted by worker {}", accepted.job_id(),
               accepted.attempt(), accepted.rank(), worker_id);
}

}  // namespace fsdpd::server
