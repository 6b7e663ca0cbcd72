#include "server/worker_registry.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace fsdpd::server {

std::string WorkerRegistry::NewIdLocked() {
  // A random prefix keeps ids unique across coordinator restarts, where the counter restarts.
  static const uint32_t prefix = std::random_device{}();
  std::string id;
  do {
    id = absl::StrFormat("worker-%08x-%d", prefix, next_number_++);
  } while (workers_.count(id) > 0);
  return id;
}

bool WorkerRegistry::LiveLocked(const Entry& entry, Clock::time_point now) const {
  return entry.session != nullptr &&
         (entry.read_paused || now - entry.last_heartbeat <= config_.heartbeat_timeout);
}

void WorkerRegistry::ShowWorkLocked(Entry& entry) {
  if (entry.info.state() != v1::LOST) {
    entry.info.set_state(entry.assignment.active() || entry.claim.active() ? v1::BUSY : v1::IDLE);
  }
  // Only what the coordinator assigned is shown as the worker's job.
  entry.info.set_job_id(entry.assignment.active() ? entry.assignment.job_id : "");
  entry.info.set_rank(entry.assignment.active() ? entry.assignment.rank : 0);
}

absl::Status WorkerRegistry::CheckReclaimLocked(const std::string& id, const Entry& entry,
                                                const std::string& principal,
                                                Clock::time_point now) const {
  if (entry.principal != principal) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker id \"", id, "\" is bound to another credential; register without an id"));
  }
  if (LiveLocked(entry, now)) {
    return absl::AlreadyExistsError(
        absl::StrCat("worker id \"", id,
                     "\" has a live session; it can be reclaimed once that session is gone"));
  }
  return absl::OkStatus();
}

std::string WorkerRegistry::ReturningIdLocked(const v1::RegisterRequest& request,
                                              const std::string& principal,
                                              Clock::time_point now) const {
  for (const auto& [id, entry] : workers_) {
    const v1::Worker& info = entry.info;
    const bool same_device = info.hostname() == request.hostname() &&
                             info.device_kind() == request.device_kind() &&
                             info.gpu_index() == request.gpu_index() &&
                             (info.gpu_uuid().empty() || request.gpu_uuid().empty() ||
                              info.gpu_uuid() == request.gpu_uuid());
    // Only an id whose worker is gone: LOST, or its session stream ended. A worker registered
    // a moment ago that has not opened its session yet is not gone (two workers starting
    // together on one host would otherwise share an id).
    const bool gone = info.state() == v1::LOST || entry.session_ended;
    // Then the same rule as an id sent back: the same credential, and no live session.
    if (same_device && gone && CheckReclaimLocked(id, entry, principal, now).ok()) return id;
  }
  return "";
}

absl::Status WorkerRegistry::CheckPrincipal(const std::string& worker_id,
                                            const std::string& principal) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = workers_.find(worker_id);
  if (found == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("unknown worker \"", worker_id, "\"; call Register before Session"));
  }
  if (found->second.principal != principal) {
    return absl::PermissionDeniedError(
        absl::StrCat("worker id \"", worker_id, "\" is bound to another credential"));
  }
  return absl::OkStatus();
}

AttemptStanding WorkerRegistry::Standing(const std::string& principal, const std::string& job_id,
                                         int attempt) const {
  std::lock_guard<std::mutex> lock(mutex_);
  AttemptStanding standing;
  auto found = attempt_workers_.find({job_id, attempt});
  if (found == attempt_workers_.end()) return standing;
  standing.ranks = found->second.ranks;
  standing.runs = found->second.principals.count(principal) > 0;
  return standing;
}

void WorkerRegistry::SetAssignmentLocked(Entry& entry, RankAssignment assignment) {
  fleet_.reset();  // so every method that goes through here clears the shared fleet
  if (entry.assignment.active()) {
    auto found = attempt_workers_.find({entry.assignment.job_id, entry.assignment.attempt});
    if (found != attempt_workers_.end()) {
      AttemptWorkers& workers = found->second;
      --workers.ranks;
      if (--workers.principals[entry.principal] == 0) workers.principals.erase(entry.principal);
      if (workers.ranks == 0) attempt_workers_.erase(found);
    }
  }
  entry.assignment = std::move(assignment);
  if (entry.assignment.active()) {
    AttemptWorkers& workers = attempt_workers_[{entry.assignment.job_id, entry.assignment.attempt}];
    ++workers.ranks;
    ++workers.principals[entry.principal];
  }
}

bool WorkerRegistry::ConfirmClaim(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = workers_.find(worker_id);
  if (found == workers_.end() || !found->second.claim.active()) return false;
  Entry& entry = found->second;
  SetAssignmentLocked(entry, std::exchange(entry.claim, {}));
  ShowWorkLocked(entry);
  return true;
}

absl::StatusOr<std::pair<std::string, RankAssignment>> WorkerRegistry::Register(
    const v1::RegisterRequest& request, Clock::time_point now, const std::string& principal) {
  if (request.device_kind() != "cpu" && request.device_kind() != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat(
        "device_kind: must be \"cpu\" or \"cuda\", got \"", request.device_kind(), "\""));
  }
  if (request.hostname().empty()) {
    return absl::InvalidArgumentError("hostname: must not be empty");
  }
  if (request.memory_bytes() < 0) {
    return absl::InvalidArgumentError("memory_bytes: must not be negative");
  }
  // -1 is how a CPU worker says it has no GPU.
  if (request.gpu_index() < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpu_index: must be -1 (no GPU) or a device index, got ", request.gpu_index()));
  }
  std::shared_ptr<WorkerSession> stale;
  std::unique_lock<std::mutex> lock(mutex_);
  std::string id = request.worker_id();
  if (id.empty()) id = ReturningIdLocked(request, principal, now);
  if (id.empty()) id = NewIdLocked();
  auto known = workers_.find(id);
  if (known != workers_.end()) {
    if (absl::Status status = CheckReclaimLocked(id, known->second, principal, now); !status.ok()) {
      return status;
    }
  } else if (static_cast<int64_t>(workers_.size()) >= config_.max_workers) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the coordinator already knows ", workers_.size(),
                     " workers, its --max-workers; lost workers are forgotten after ",
                     config_.lost_retention.count() / 1000, "s"));
  }
  Entry& entry = workers_[id];
  entry.info.set_id(id);
  // What the worker says it runs is a claim until the job manager confirms it (ConfirmClaim).
  // Dropped before the principal changes: attempt_workers_ counts assignments by principal.
  RankAssignment previous = entry.assignment;
  SetAssignmentLocked(entry, {});
  entry.principal = principal;
  entry.session_ended = false;
  // A session still attached here is not live (CheckReclaimLocked): it is closed, so the new
  // session this registration leads to is not refused for it.
  stale = std::move(entry.session);
  entry.info.set_hostname(request.hostname());
  entry.info.set_device_kind(request.device_kind());
  entry.info.set_gpu_index(request.gpu_index());
  entry.info.set_gpu_name(request.gpu_name());
  entry.info.set_gpu_uuid(request.gpu_uuid());
  entry.info.set_gpu_compute_capability(request.gpu_compute_capability());
  AdmitMemoryLocked(entry, request.memory_bytes());
  entry.info.set_address(request.address());
  *entry.info.mutable_health() = request.health();
  entry.info.set_last_heartbeat_unix_millis(absl::ToUnixMillis(absl::Now()));
  entry.last_heartbeat = now;
  entry.claim = {};
  if (!request.running_job_id().empty()) {
    entry.claim = {request.running_job_id(), request.running_attempt(), request.running_rank()};
  }
  entry.info.set_state(v1::IDLE);
  ShowWorkLocked(entry);
  lock.unlock();
  if (stale != nullptr) {
    stale->Close(absl::AbortedError("the worker registered again; this session was silent"));
  }
  return std::make_pair(id, previous);
}

WorkerSnapshot WorkerRegistry::SnapshotLocked(const Entry& entry) const {
  return {entry.info, entry.assignment, entry.claim, entry.session != nullptr};
}

std::optional<WorkerSnapshot> WorkerRegistry::Find(const std::string& worker_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = workers_.find(worker_id);
  if (found == workers_.end()) return std::nullopt;
  return SnapshotLocked(found->second);
}

std::vector<v1::Worker> WorkerRegistry::List() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<v1::Worker> workers;
  for (const auto& [id, entry] : workers_) workers.push_back(entry.info);
  return workers;
}

std::vector<IdleWorker> WorkerRegistry::IdleWorkers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<IdleWorker> idle;
  for (const auto& [id, entry] : workers_) {
    if (entry.info.state() != v1::IDLE || entry.session == nullptr) continue;
    if (!entry.info.health().unhealthy().empty()) continue;
    idle.push_back(
        {id, entry.info.device_kind(), entry.info.health().checkpoint_root_error().empty()});
  }
  return idle;
}

std::shared_ptr<const std::vector<FleetWorker>> WorkerRegistry::Fleet() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fleet_ != nullptr) return fleet_;
  auto fleet = std::make_shared<std::vector<FleetWorker>>();
  fleet->reserve(workers_.size());
  for (const auto& [id, entry] : workers_) {
    const v1::Worker& info = entry.info;
    FleetWorker worker;
    worker.id = id;
    worker.hostname = info.hostname();
    worker.device_kind = info.device_kind();
    worker.gpu_index = info.gpu_index();
    worker.memory_bytes = info.memory_bytes();
    worker.compute_capability = info.gpu_compute_capability();
    worker.root_id = info.health().checkpoint_root_id();
    if (info.state() == v1::LOST) {
      worker.state = FleetWorker::State::kLost;
    } else if (entry.assignment.active()) {
      worker.state = FleetWorker::State::kRunning;
      worker.job_id = entry.assignment.job_id;
      worker.rank = entry.assignment.rank;
    } else if (info.state() != v1::IDLE || entry.session == nullptr ||
               !info.health().unhealthy().empty() ||
               !info.health().checkpoint_root_error().empty()) {
      // Counts for the fleet, takes nothing: busy with work it claims but was not assigned
      // (until it reports that work ended), no session, or it reported itself unfit (an
      // unhealthy worker, or one that cannot write its checkpoint root; the job manager says
      // why a job waits on such workers).
      worker.state = FleetWorker::State::kAway;
    }
    fleet->push_back(std::move(worker));
  }
  fleet_ = std::move(fleet);
  return fleet_;
}

void WorkerRegistry::AdmitMemoryLocked(Entry& entry, int64_t claimed) const {
  v1::Worker& info = entry.info;
  const int64_t ceiling = config_.MemoryCeiling(info.device_kind());
  int64_t admitted = claimed;
  std::string note;
  if (ceiling > 0 && (claimed == 0 || claimed > ceiling)) {
    admitted = ceiling;
    note = absl::StrCat("capped by --max-worker-memory (", ceiling >> 20, " MiB)");
  }
  if (entry.evidence_bytes > 0 && (admitted == 0 || admitted > entry.evidence_bytes)) {
    admitted = entry.evidence_bytes;
    note = entry.evidence;
  }
  info.set_claimed_memory_bytes(claimed);
  info.set_memory_bytes(admitted);
  info.set_memory_note(note);
}

void WorkerRegistry::LowerMemory(const std::string& worker_id, int64_t bytes,
                                 const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = workers_.find(worker_id);
  if (found == workers_.end() || bytes <= 0) return;
  Entry& entry = found->second;
  if (entry.evidence_bytes > 0 && entry.evidence_bytes <= bytes) return;
  fleet_.reset();
  entry.evidence_bytes = bytes;
  entry.evidence = why;
  AdmitMemoryLocked(entry, entry.info.claimed_memory_bytes());
}

int64_t WorkerRegistry::LargestMemory(const std::string& device_kind) const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t largest = 0;
  for (const auto& [id, entry] : workers_) {
    if (entry.info.device_kind() == device_kind && entry.info.state() != v1::LOST) {
      largest = std::max(largest, entry.info.memory_bytes());
    }
  }
  return largest;
}

std::map<v1::WorkerState, int> WorkerRegistry::CountByState() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<v1::WorkerState, int> counts;
  for (const auto& [id, entry] : workers_) ++counts[entry.info.state()];
  return counts;
}

bool WorkerRegistry::SetHealth(const std::string& worker_id, const v1::WorkerHealth& health) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = workers_.find(worker_id);
  if (found == workers_.end()) return false;
  v1::Worker& info = found->second.info;
  if (info.health().SerializeAsString() == health.SerializeAsString()) return false;
  fleet_.reset();
  *info.mutable_health() = health;
  return true;
}

void WorkerRegistry::Assign(const std::string& worker_id, const RankAssignment& assignment) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = workers_.find(worker_id);
  if (found == workers_.end()) return;
  Entry& entry = found->second;
  SetAssignmentLocked(entry, assignment);
  entry.claim = {};
  ShowWorkLocked(entry);
}

void WorkerRegistry::Release(const std::string& worker_id, const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = workers_.find(worker_id);
  if (found == workers_.end()) return;
  Entry& entry = found->second;
  auto runs = [&](const RankAssignment& work) {
    return work.active() && work.job_id == job_id && work.attempt == attempt;
  };
  if (!runs(entry.assignment) && !runs(entry.claim)) return;
  fleet_.reset();
  if (runs(entry.assignment)) SetAssignmentLocked(entry, {});
  if (runs(entry.claim)) entry.claim = {};
  ShowWorkLocked(entry);
}

absl::Status WorkerRegistry::AttachSession(const std::string& worker_id,
                                           std::shared_ptr<WorkerSession> session,
                                           Clock::time_point now) {
  std::shared_ptr<WorkerSession> replaced;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = workers_.find(worker_id);
    if (found == workers_.end()) {
      return absl::NotFoundError(
          absl::StrCat("unknown worker \"", worker_id, "\"; call Register before Session"));
    }
    Entry& entry = found->second;
    if (LiveLocked(entry, now)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "worker \"", worker_id,
          "\" has a live session; a new one is accepted once that one closes or is silent for ",
          config_.heartbeat_timeout.count(), " ms"));
    }
    fleet_.reset();
    replaced = std::exchange(entry.session, std::move(session));
    entry.session_ended = false;
    entry.read_paused = false;
  }
  if (replaced != nullptr) {
    replaced->Close(absl::AbortedError("a newer session of this worker replaced this silent one"));
  }
  return absl::OkStatus();
}

void WorkerRegistry::DetachSession(const std::string& worker_id, const WorkerSession* session) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = workers_.find(worker_id);
  if (found != workers_.end() && found->second.session.get() == session) {
    fleet_.reset();
    found->second.session.reset();
    found->second.session_ended = true;
    found->second.read_paused = false;
  }
}

void WorkerRegistry::SetReadPaused(const std::string& worker_id, bool paused,
                                   Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = workers_.find(worker_id);
  if (found == workers_.end() || found->second.session == nullptr) return;
  Entry& entry = found->second;
  // Reading resumes: the worker's silence counts from now, when it could be heard again.
  if (entry.read_paused && !paused) entry.last_heartbeat = std::max(entry.last_heartbeat, now);
  entry.read_paused = paused;
}

bool WorkerRegistry::Heartbeat(const std::string& worker_id, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = workers_.find(worker_id);
  if (found == workers_.end()) return false;
  Entry& entry = found->second;
  entry.last_heartbeat = now;
  entry.info.set_last_heartbeat_unix_millis(absl::ToUnixMillis(absl::Now()));
  if (entry.info.state() == v1::LOST) {
    fleet_.reset();
    entry.info.set_state(v1::IDLE);
    ShowWorkLocked(entry);
  }
  return true;
}

bool WorkerRegistry::Send(const std::string& worker_id, const v1::CoordinatorMessage& message) {
  std::shared_ptr<WorkerSession> session;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = workers_.find(worker_id);
    if (found == workers_.end() || found->second.session == nullptr) return false;
    session = found->second.session;
  }
  session->Send(message);
  return true;
}

void WorkerRegistry::CloseAllSessions(const absl::Status& status) {
  std::vector<std::shared_ptr<WorkerSession>> sessions;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fleet_.reset();
    for (auto& [id, entry] : workers_) {
      if (entry.session != nullptr) sessions.push_back(std::move(entry.session));
    }
  }
  for (const auto& session : sessions) session->Close(status);
}

WorkerRegistry::Expiry WorkerRegistry::ExpireSilent(Clock::time_point now,
                                                    const ExpiryRules& rules) {
  std::lock_guard<std::mutex> lock(mutex_);
  Expiry expiry;
  for (auto it = workers_.begin(); it != workers_.end();) {
    Entry& entry = it->second;
    const bool forgotten = entry.info.state() == v1::LOST && entry.session == nullptr &&
                           now - entry.last_heartbeat > config_.lost_retention;
    if (forgotten) SetAssignmentLocked(entry, {});  // none: a lost worker's work is a claim
    it = forgotten ? workers_.erase(it) : std::next(it);
  }
  // Silence, from the later of the last message and the floor; none while reading is paused.
  auto silence = [&](const Entry& entry) {
    if (entry.session != nullptr && entry.read_paused) return Clock::duration::zero();
    return now - std::max(entry.last_heartbeat, rules.heard_floor);
  };
  const auto near_timeout = config_.heartbeat_timeout - config_.heartbeat_interval;
  for (const auto& [id, entry] : workers_) {
    if (entry.info.state() == v1::LOST) continue;
    ++expiry.fleet;
    if (entry.session != nullptr && silence(entry) > near_timeout) ++expiry.silent;
  }
  const bool mass = expiry.silent >= 2 && rules.mass_silence_fraction < 1.0 &&
                    expiry.silent > rules.mass_silence_fraction * expiry.fleet;
  expiry.hold_ended = rules.holding && !mass;
  for (auto& [id, entry] : workers_) {
    if (entry.info.state() == v1::LOST) continue;
    if (silence(entry) <= config_.heartbeat_timeout) continue;
    if ((mass || expiry.hold_ended) && entry.session != nullptr) {
      if (mass) ++expiry.held;
      continue;
    }
    entry.info.set_state(v1::LOST);
    expiry.lost.push_back(SnapshotLocked(entry));
    // Whatever it ran is failed by the job manager. A silent worker may still run it (a
    // partition, not a death): kept as its claim, so that if it is heard again it stays BUSY,
    // off the scheduler, until it reports that rank ended (Release).
    if (entry.assignment.active()) entry.claim = entry.assignment;
    SetAssignmentLocked(entry, {});
    ShowWorkLocked(entry);
  }
  return expiry;
}

}  // namespace fsdpd::server
