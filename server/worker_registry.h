// The workers the coordinator knows: their devices, liveness, session stream and the rank they
// run. Registration is in memory only: after a coordinator restart workers register again and
// say what they are running, and the job manager reconciles that with the stored attempts.
//
// A worker's standing in a job (its rank's rendezvous scope, its log lines) comes only from what
// the coordinator assigned to its id, which is bound to its credential. What a worker says at
// registration that it runs is a claim: recorded apart, it keeps the worker BUSY (off the
// scheduler) until the worker reports that work ended, and gives it no standing until the job
// manager confirms the coordinator assigned that rank to this worker id (ConfirmClaim).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fsdpd/v1/jobs.pb.h"
#include "fsdpd/v1/worker.pb.h"
#include "server/config.h"
#include "server/scheduler.h"

namespace fsdpd::server {

// The coordinator's end of one worker's Session stream. Send never blocks: messages are queued.
class WorkerSession {
 public:
  virtual ~WorkerSession() = default;
  virtual void Send(const v1::CoordinatorMessage& message) = 0;
  // Ends the stream with this status once queued messages are written.
  virtual void Close(const absl::Status& status) = 0;
};

// The rank of one attempt that a worker runs (rank < 0: none).
struct RankAssignment {
  std::string job_id;
  int attempt = 0;
  int rank = -1;
  bool active() const { return rank >= 0; }
};

struct WorkerSnapshot {
  v1::Worker info;
  RankAssignment assignment;  // what the coordinator assigned (or confirmed); never a bare claim
  RankAssignment claim;       // what the worker says it runs that is not confirmed
  bool connected = false;
};

// Who may use an attempt's rendezvous scope, and the ranks that size it.
struct AttemptStanding {
  bool runs = false;  // a worker bound to the caller's principal was assigned a rank of it
  int ranks = 0;      // workers assigned a rank of it
};

// An idle, connected worker and whether it can write its checkpoint root, where every job
// writes (its folder, checkpoints, rank 0's exported model).
struct IdleWorker {
  std::string id;
  std::string device_kind;
  bool can_checkpoint = true;
};

class WorkerRegistry {
 public:
  using Clock = std::chrono::steady_clock;

  explicit WorkerRegistry(WorkerRegistryConfig config) : config_(std::move(config)) {}
  const WorkerRegistryConfig& config() const { return config_; }

  // Registers a new worker or refreshes a known one; keeps the id the worker sent back. A
  // worker that sends no id (a restarted process) takes the id of a known worker on the same
  // host and device (hostname, device kind, GPU index, and GPU UUID when both have one) that is
  // gone (LOST, or its session stream ended) when that id passes the checks below, so a
  // restart does not leave its old id LOST.
  // Returns the worker's id and the assignment the registry held for it before this call. The
  // request's running_job_id/attempt/rank is recorded as the worker's claim, not as an
  // assignment; its assignment is cleared until the job manager confirms the claim. A still
  // attached session that is not live (silent past the heartbeat timeout) is closed: the new
  // registration proves it dead.
  // A worker id is bound to the principal (auth.h) that first registered it:
  //  - PERMISSION_DENIED when another principal registers a known id;
  //  - ALREADY_EXISTS while the id has a live session (open and heard from within the
  //    heartbeat timeout): the same credential reclaims it only after the old session is gone;
  //  - RESOURCE_EXHAUSTED for a new id once config().max_workers are known.
  absl::StatusOr<std::pair<std::string, RankAssignment>> Register(
      const v1::RegisterRequest& request, Clock::time_point now, const std::string& principal = "");
  // PERMISSION_DENIED unless the worker is known and bound to this principal (a Session).
  absl::Status CheckPrincipal(const std::string& worker_id, const std::string& principal) const;
  // Whether a worker bound to this principal was assigned a rank of (job, attempt), and how many
  // workers were: who may use the attempt's rendezvous scope, and how large it may grow. Claims
  // count for neither.
  AttemptStanding Standing(const std::string& principal, const std::string& job_id,
                           int attempt) const;
  // Makes the worker's claim its assignment: the job manager found that the coordinator assigned
  // that rank to this worker id. False when it has no such claim.
  bool ConfirmClaim(const std::string& worker_id);

  std::optional<WorkerSnapshot> Find(const std::string& worker_id) const;
  std::vector<v1::Worker> List() const;
  // Idle, connected workers, for saying why a job waits. A worker that reported itself
  // unhealthy is left out; one that cannot write its checkpoint root is listed with
  // can_checkpoint false (Fleet shows it as kAway, so the scheduler places nothing on it).
  std::vector<IdleWorker> IdleWorkers() const;
  // Records the health a worker reported in a heartbeat (Worker.health); returns whether it
  // changed. Register records the health a (re)starting worker reports.
  bool SetHealth(const std::string& worker_id, const v1::WorkerHealth& health);
  // Every known worker: idle with a session (kIdle), idle without one (kAway), LOST (kLost), or
  // busy (kRunning, with its job; the job manager tells which of those are draining). Built
  // once and shared until a worker changes in a way it shows: heartbeats change nothing in it,
  // and on 10,000 workers building it was most of a scheduling pass.
  std::shared_ptr<const std::vector<FleetWorker>> Fleet() const;
  // The largest admitted memory among registered workers of this kind (0: none known).
  int64_t LargestMemory(const std::string& device_kind) const;
  // Memory admission. A worker's memory_bytes is a claim: the coordinator admits at most
  // config().MemoryCeiling(kind) (--max-worker-memory; a claim of 0 then admits the ceiling),
  // and at most what evidence left it (LowerMemory). v1::Worker.memory_bytes is the admitted
  // figure, claimed_memory_bytes the claim, memory_note why they differ.
  // Lowers the worker's admitted memory to at most `bytes` for as long as it is known (across
  // its re-registrations), saying why.
  void LowerMemory(const std::string& worker_id, int64_t bytes, const std::string& why);
  std::map<v1::WorkerState, int> CountByState() const;

  void Assign(const std::string& worker_id, const RankAssignment& assignment);
  // Frees the worker (BUSY → IDLE) if it still runs, or claims, that attempt.
  void Release(const std::string& worker_id, const std::string& job_id, int attempt);

  // NOT_FOUND when the worker is unknown; ALREADY_EXISTS while it has a live session (one that
  // is attached and heard from within the heartbeat timeout), as Register answers: a session is
  // replaced only once it is provably dead, its stream closed or silent past the timeout.
  absl::Status AttachSession(const std::string& worker_id, std::shared_ptr<WorkerSession> session,
                             Clock::time_point now);
  void DetachSession(const std::string& worker_id, const WorkerSession* session);
  bool Heartbeat(const std::string& worker_id, Clock::time_point now);
  // Returns false when the worker is unknown or has no open session.
  bool Send(const std::string& worker_id, const v1::CoordinatorMessage& message);
  void CloseAllSessions(const absl::Status& status);

  // While the coordinator has stopped reading a worker's session (its messages wait for the
  // job manager, worker_service.cc), the worker's silence is the coordinator's doing: it is not
  // expired, its session counts as live, and when reading resumes its silence counts from then.
  void SetReadPaused(const std::string& worker_id, bool paused, Clock::time_point now);

  // What decides that a silent worker is lost (docs/operations.md "Overload").
  struct ExpiryRules {
    // Silence counts from no earlier than this: when the coordinator last stopped lagging, so
    // a worker is lost only after a full timeout in which the coordinator could have read it.
    Clock::time_point heard_floor{};
    // Mass silence: when at least two workers with an open session, and more than this
    // fraction of the workers not LOST, are silent for more than the timeout less one
    // heartbeat interval (they went quiet within one heartbeat period), the cause is more
    // likely the coordinator, its host or its network than that many deaths at once: none with
    // an open session is expired while it lasts. A worker whose stream ended is expired as
    // always. 1 or more: never.
    double mass_silence_fraction = 1.0;
    // The previous call held workers by the mass-silence rule. When that hold ends, no worker
    // with an open session is expired in the same call (Expiry::hold_ended): the caller moves
    // heard_floor to now, so those still silent get a full timeout from the end of the hold,
    // as Kubernetes' node lifecycle controller resets its nodes' probe times when a zone leaves
    // full disruption. Workers reconnect one by one after a partition (gRPC's backoff).
    bool holding = false;
  };
  struct Expiry {
    std::vector<WorkerSnapshot> lost;  // marked LOST now, with the assignment they had
    int held = 0;                      // silent past the timeout, kept by the mass-silence rule
    int silent = 0;           // with an open session, silent past the timeout less one interval
    int fleet = 0;            // workers not LOST before this call
    bool hold_ended = false;  // rules.holding, and no mass silence now
  };
  // Marks LOST every worker silent past the timeout under `rules` and returns them (with the
  // assignment they had, which the job manager must fail). Forgets workers LOST for longer
  // than the retention.
  Expiry ExpireSilent(Clock::time_point now, const ExpiryRules& rules);
  std::vector<WorkerSnapshot> ExpireSilentWorkers(Clock::time_point now) {
    return ExpireSilent(now, {}).lost;
  }

 private:
  struct Entry {
    v1::Worker info;
    RankAssignment assignment;
    RankAssignment claim;
    std::shared_ptr<WorkerSession> session;
    Clock::time_point last_heartbeat;
    std::string principal;       // the credential the id is bound to
    bool session_ended = false;  // its session stream ended and no other has been opened
    bool read_paused = false;    // the coordinator stopped reading its session (SetReadPaused)
    int64_t evidence_bytes = 0;  // LowerMemory's bound (0: none)
    std::string evidence;
  };
  // Whether the entry's session is attached and heard from within the heartbeat timeout.
  bool LiveLocked(const Entry& entry, Clock::time_point now) const;
  // The entry's state and shown job from its assignment and claim (LOST stays LOST).
  static void ShowWorkLocked(Entry& entry);
  // Sets the entry's admitted memory from its claim, the ceiling and the evidence.
  void AdmitMemoryLocked(Entry& entry, int64_t claimed) const;
  // The checks of Register for an id already known.
  absl::Status CheckReclaimLocked(const std::string& id, const Entry& entry,
                                  const std::string& principal, Clock::time_point now) const;
  // The id a worker registering without one returns to, or "" (see Register).
  std::string ReturningIdLocked(const v1::RegisterRequest& request, const std::string& principal,
                                Clock::time_point now) const;
  WorkerSnapshot SnapshotLocked(const Entry& entry) const;
  std::string NewIdLocked();

  const WorkerRegistryConfig config_;
  // Every change of an entry's assignment goes through here, which keeps attempt_workers_ (an
  // entry's principal changes only while it has no assignment).
  void SetAssignmentLocked(Entry& entry, RankAssignment assignment);
  // The workers assigned to one (job, attempt): how many, and how many hold each credential.
  struct AttemptWorkers {
    int ranks = 0;
    std::map<std::string, int> principals;
  };

  mutable std::mutex mutex_;
  std::map<std::string, Entry> workers_;
  // Fleet's answer, until the next change of what it reads: every method that changes an
  // entry's info, assignment, claim or session, or adds or removes an entry, clears it (those
  // that change an assignment through SetAssignmentLocked, there).
  mutable std::shared_ptr<const std::vector<FleetWorker>> fleet_;
  // Standing, asked on every rendezvous call, reads this instead of the whole fleet.
  std::map<std::pair<std::string, int>, AttemptWorkers> attempt_workers_;
  uint64_t next_number_ = 1;
};

}  // namespace fsdpd::server
