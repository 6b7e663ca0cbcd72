#include "server/worker_service.h"

#include <pthread.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "server/grpc_util.h"
#include "server/input_limits.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {

// Runs the job manager on session messages without making gRPC's threads wait for its lock.
// A thread that receives a message queues it and returns at once; one thread of the dispatcher's
// own takes runs of messages until the queue is empty. gRPC's threads so stay free to answer
// JobService calls (SubmitJob, GetJob) while thousands of workers stream reports: when the
// receiving thread drained the queue itself, under overload one of gRPC's threads never came
// back and reads waited behind the report stream (bench/RESULTS.md, "Control plane under
// overload"). The job manager's lock is taken once per run instead of once per message. Each
// worker's messages are handled in arrival order. A session keeps reading while fewer than
// kMaxQueuedPerSession of its messages wait and pauses beyond that, so the queue stays bounded and
// gRPC flow control slows a worker the coordinator cannot keep up with. The age of the oldest
// waiting message is the coordinator's processing lag (processing_lag.h), and a paused session's
// worker is not counted silent (WorkerRegistry::SetReadPaused): neither the lag nor the pause is
// the worker's doing.
class SessionDispatcher {
 public:
  struct Item {
    std::string worker_id;
    v1::WorkerMessage message;
    ProcessingLag::Clock::time_point received;
    // Runs once the message is handled, on the thread that handled it.
    std::function<void()> done;
  };

  explicit SessionDispatcher(JobManager& jobs)
      : jobs_(jobs), lag_(jobs.processing_lag()), thread_([this] { Run(); }) {}

  // Handles what is still queued (each item's done() may own the end of its session's reactor).
  ~SessionDispatcher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wakeup_.notify_one();
    thread_.join();
    Drain();
  }

  // Queues the message for the dispatching thread.
  void Post(Item item) {
    std::lock_guard<std::mutex> lock(mutex_);
    // While a run is handled, the oldest waiting message is that run's first, noted already.
    // The dispatching thread waits only on an empty queue while not draining: one wake-up per
    // burst, not one per message.
    const bool wake = !draining_ && queue_.empty();
    if (wake) lag_.NoteOldestWaiting(item.received);
    queue_.push_back(std::move(item));
    if (wake) wakeup_.notify_one();
  }

  void Run() {
    // Linux keeps a nice value per thread (setpriority(2) on the thread's id); raising one's
    // own needs no privilege. Failing to lower the priority is harmless: it is logged.
    // Named so that operators see it in top -H. It keeps the process's priority: at nice +10
    // it got so little CPU beside gRPC's threads reading 10,000 sessions that the reports'
    // backlog grew without bound (bench/RESULTS.md, "At cluster scale").
    pthread_setname_np(pthread_self(), "fsdpd-dispatch");
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      wakeup_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      lock.unlock();
      Drain();
      lock.lock();
    }
  }

  void Drain() {
    // Runs of about this many reports: one hold of the job manager's lock and one store commit
    // per run, and one copy of each job record the run touches (kept to undo the run if the
    // commit fails). A record holds its attempts' rank lists, so with 1,000-rank jobs runs of 32
    // spent most of the dispatcher's time copying them; a run of 256 holds the lock for a few
    // milliseconds (bench/RESULTS.md, "At cluster scale"). A paced heartbeat counts for the
    // step reports it carries: 256 heartbeats of 25 reports each held the lock for tens of
    // milliseconds, and SubmitJob waited behind them (bench/RESULTS.md, "Backpressure").
    constexpr size_t kRun = 256;
    std::vector<Item> run;
    std::vector<JobManager::WorkerMessageRef> refs;
    std::unique_lock<std::mutex> lock(mutex_);
    draining_ = true;
    while (!queue_.empty()) {
      // The processing lag: how long the oldest message has waited (it waits until handled).
      lag_.NoteOldestWaiting(queue_.front().received);
      size_t reports = 0;
      while (!queue_.empty() && reports < kRun) {
        const v1::WorkerMessage& message = queue_.front().message;
        reports += 1 + (message.has_heartbeat() ? message.heartbeat().steps_size() : 0);
        run.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      lock.unlock();
      refs.clear();
      for (const Item& item : run) refs.push_back({&item.worker_id, &item.message});
      // Reports the store cannot take yet wait here, then at the workers (flow control), and
      // count as processing lag: the coordinator paces its workers (report_pacer.h).
      jobs_.WaitForStoreToCatchUp();
      jobs_.OnWorkerMessages(refs);
      // A done() may start a read that completes inline and posts again: it is queued, and this
      // loop takes it.
      for (Item& item : run) item.done();
      run.clear();
      lock.lock();
    }
    draining_ = false;
    lag_.NoteNothingWaiting();
  }

 private:
  JobManager& jobs_;
  ProcessingLag& lag_;
  std::mutex mutex_;
  std::deque<Item> queue_;
  bool draining_ = false;
  bool stopping_ = false;
  std::condition_variable wakeup_;
  std::thread thread_;  // last: starts once the members above exist
};

namespace {

using SessionBase =
    QueuedWriteReactor<grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>,
                       v1::CoordinatorMessage>;

class SessionReactor;

// What the registry holds for a session. It outlives the reactor, so it forwards only while
// the reactor exists.
class SessionHandle : public WorkerSession {
 public:
  explicit SessionHandle(SessionReactor* reactor) : reactor_(reactor) {}
  void Send(const v1::CoordinatorMessage& message) override;
  void Close(const absl::Status& status) override;
  void Detach() {
    std::lock_guard<std::mutex> lock(mutex_);
    reactor_ = nullptr;
  }

 private:
  std::mutex mutex_;
  SessionReactor* reactor_;
};

// Reports of one session the dispatcher may hold before the session stops reading (a message
// counts once, a paced heartbeat once per step report it carries, plus one): reads go on while
// the dispatcher keeps up, and gRPC flow control slows a worker once it falls this far behind,
// so memory stays bounded by workers times this. Counted in messages, 16 paced heartbeats of a
// thousand-rank job's workers held 400 reports each session, and RSS grew to 830 MiB at
// 10,000 workers (bench/RESULTS.md, "Backpressure").
constexpr int kMaxQueuedPerSession = 16;

class SessionReactor : public SessionBase {
 public:
  SessionReactor(JobManager& jobs, SessionDispatcher& dispatcher, MetricsExporter* metrics,
                 std::string principal)
      : jobs_(jobs),
        dispatcher_(dispatcher),
        handle_(std::make_shared<SessionHandle>(this)),
        principal_(std::move(principal)) {
    if (metrics != nullptr) {
      SetOnFinish([metrics](grpc::StatusCode code) { metrics->CountRpc("Session", code); });
    }
    StartRead(&incoming_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The worker closed its side or the connection broke. Its work is not failed here: it
      // may reconnect within the heartbeat timeout.
      FinishAfterDrain(grpc::Status::OK);
      return;
    }
    if (worker_id_.empty()) {
      if (incoming_.worker_id().empty()) {
        FinishAfterDrain(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                      "the first Session message must carry worker_id"));
        return;
      }
      if (absl::Status status = jobs_.OpenSession(incoming_.worker_id(), handle_, principal_);
          !status.ok()) {
        FinishAfterDrain(ToGrpcStatus(status));
        return;
      }
      worker_id_ = incoming_.worker_id();
      spdlog::info("worker {} opened its session", worker_id_);
    } else if (!incoming_.worker_id().empty() && incoming_.worker_id() != worker_id_) {
      FinishAfterDrain(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                    "worker_id changed in the middle of a session"));
      return;
    }
    if (CapWorkerMessage(&incoming_) && !warned_long_log_) {
      warned_long_log_ = true;
      spdlog::warn(
          "worker {} sent a log line over {} bytes or a reason over {} bytes; they are "
          "truncated",
          worker_id_, kMaxLogLineBytes, kMaxReasonBytes);
    }
    jobs_.NoteAlive(worker_id_);
    const int reports = 1 + (incoming_.has_heartbeat() ? incoming_.heartbeat().steps_size() : 0);
    {
      // Counted before the post: the dispatcher may hand the message back before Post returns.
      std::lock_guard<std::mutex> lock(state_mutex_);
      ++held_by_dispatcher_;
      held_reports_ += reports;
    }
    // Posted before the session may pause: once paused_ is set, OnDispatched may start the next
    // read into incoming_ on the dispatcher's thread, so the message must be out of incoming_
    // and in the queue (ahead of the next one) by then.
    dispatcher_.Post({worker_id_, std::move(incoming_), ProcessingLag::Clock::now(),
                      [this, reports] { OnDispatched(reports); }});
    bool read_next = false;
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      read_next = held_reports_ < kMaxQueuedPerSession;
      if (!read_next) {
        paused_ = true;
        // Not reading is the coordinator's doing: the worker is not silent meanwhile. Noted
        // under state_mutex_, so the resume in OnDispatched cannot come first.
        jobs_.NoteReadPaused(worker_id_, true);
      }
    }
    if (read_next) StartRead(&incoming_);
  }

  // The coordinator ends the stream (shutdown, or a newer session of the same worker).
  void CloseFromCoordinator(const absl::Status& status) {
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      closing_ = true;
    }
    FinishAfterDrain(ToGrpcStatus(status));
  }

  void OnDone() override {
    handle_->Detach();
    if (!worker_id_.empty()) {
      jobs_.CloseSession(worker_id_, handle_.get());
      spdlog::info("worker {} session closed", worker_id_);
    }
    std::unique_lock<std::mutex> lock(state_mutex_);
    done_ = true;
    // The dispatcher still holds this reactor: OnDispatched deletes it.
    if (held_by_dispatcher_ > 0) return;
    lock.unlock();
    delete this;
  }

 private:
  void OnDispatched(int reports) {
    std::unique_lock<std::mutex> lock(state_mutex_);
    held_reports_ -= reports;
    if (paused_ && !closing_ && !done_ && held_reports_ < kMaxQueuedPerSession) {
      // The dispatcher caught up with this worker: read again. Still counted as held while
      // StartRead runs, so OnDone cannot delete the reactor under it; outside the lock, since
      // gRPC may run OnReadDone inline. A close racing with the read is fine: the read then
      // fails and the stream ends as the coordinator asked.
      paused_ = false;
      jobs_.NoteReadPaused(worker_id_, false);  // its silence counts from now
      lock.unlock();
      StartRead(&incoming_);
      lock.lock();
    }
    if (--held_by_dispatcher_ > 0 || !done_) return;
    lock.unlock();
    delete this;
  }

  JobManager& jobs_;
  SessionDispatcher& dispatcher_;
  std::shared_ptr<SessionHandle> handle_;
  const std::string principal_;  // the caller's credential; the worker id must be bound to it
  std::string worker_id_;
  v1::WorkerMessage incoming_;
  bool warned_long_log_ = false;
  // Messages with the dispatcher, whether the coordinator closed the stream, and whether gRPC is
  // done with the reactor. Whichever of OnDone and OnDispatched comes last deletes it.
  std::mutex state_mutex_;
  int held_by_dispatcher_ = 0;
  int held_reports_ = 0;  // what those messages carry (kMaxQueuedPerSession)
  bool paused_ = false;   // reading stopped at kMaxQueuedPerSession until the dispatcher catches up
  bool closing_ = false;
  bool done_ = false;
};

void SessionHandle::Send(const v1::CoordinatorMessage& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (reactor_ != nullptr) reactor_->Enqueue(message);
}

void SessionHandle::Close(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (reactor_ != nullptr) reactor_->CloseFromCoordinator(status);
}

// A Session refused before it starts (no worker credential).
class RefusedSession : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  explicit RefusedSession(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

WorkerServiceImpl::WorkerServiceImpl(JobManager& jobs, MetricsExporter* metrics,
                                     const Authenticator* authenticator)
    : jobs_(jobs),
      metrics_(metrics),
      authenticator_(authenticator),
      dispatcher_(std::make_unique<SessionDispatcher>(jobs)),
      register_limiter_(jobs.worker_config().register_rate_per_peer,
                        2 * jobs.worker_config().register_rate_per_peer) {}

WorkerServiceImpl::~WorkerServiceImpl() = default;

grpc::Status WorkerServiceImpl::CheckCaller(grpc::CallbackServerContext* context,
                                            std::string* principal) const {
  principal->clear();
  if (authenticator_ == nullptr) return grpc::Status::OK;
  return authenticator_->AuthenticateWorker(*context, principal);
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Register(grpc::CallbackServerContext* context,
                                                      const v1::RegisterRequest* request,
                                                      v1::RegisterResponse* response) {
  std::string principal;
  grpc::Status allowed = CheckCaller(context, &principal);
  // Callers without a credential are refused before they count against the peer's rate.
  if (allowed.ok()) allowed = ToGrpcStatus(register_limiter_.Take(context->peer()));
  if (!allowed.ok()) {
    if (metrics_ != nullptr) metrics_->CountRpc("Register", allowed.error_code());
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(allowed);
    return reactor;
  }
  const absl::Status valid = CheckRegistration(*request);
  absl::StatusOr<v1::RegisterResponse> registered =
      valid.ok() ? jobs_.RegisterWorker(*request, principal)
                 : absl::StatusOr<v1::RegisterResponse>(valid);
  if (registered.ok()) *response = std::move(*registered);
  const grpc::Status status = ToGrpcStatus(registered.status());
  if (metrics_ != nullptr) metrics_->CountRpc("Register", status.error_code());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* WorkerServiceImpl::Session(
    grpc::CallbackServerContext* context) {
  std::string principal;
  if (grpc::Status allowed = CheckCaller(context, &principal); !allowed.ok()) {
    if (metrics_ != nullptr) metrics_->CountRpc("Session", allowed.error_code());
    return new RefusedSession(allowed);
  }
  return new SessionReactor(jobs_, *dispatcher_, metrics_, std::move(principal));
}

}  // namespace fsdpd::server
