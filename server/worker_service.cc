#include "server/worker_service.h"

#include <memory>

#include "server/grpc_util.h"
#include "server/input_limits.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {
namespace {

using SessionBase =
    QueuedWriteReactor<grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>,
                       v1::CoordinatorMessage>;

// What the registry holds for a session. It outlives the reactor, so it forwards only while
// the reactor exists.
class SessionHandle : public WorkerSession {
 public:
  explicit SessionHandle(SessionBase* reactor) : reactor_(reactor) {}
  void Send(const v1::CoordinatorMessage& message) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (reactor_ != nullptr) reactor_->Enqueue(message);
  }
  void Close(const absl::Status& status) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (reactor_ != nullptr) reactor_->FinishAfterDrain(ToGrpcStatus(status));
  }
  void Detach() {
    std::lock_guard<std::mutex> lock(mutex_);
    reactor_ = nullptr;
  }

 private:
  std::mutex mutex_;
  SessionBase* reactor_;
};

class SessionReactor : public SessionBase {
 public:
  SessionReactor(JobManager& jobs, MetricsExporter* metrics)
      : jobs_(jobs), handle_(std::make_shared<SessionHandle>(this)) {
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
      if (absl::Status status = jobs_.OpenSession(incoming_.worker_id(), handle_); !status.ok()) {
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
    if (incoming_.has_log() && CapLogLine(incoming_.mutable_log()) && !warned_long_log_) {
      warned_long_log_ = true;
      spdlog::warn("worker {} sent a log line over {} bytes; long lines are truncated", worker_id_,
                   kMaxLogLineBytes);
    }
    jobs_.OnWorkerMessage(worker_id_, incoming_);
    StartRead(&incoming_);
  }

  void OnDone() override {
    handle_->Detach();
    if (!worker_id_.empty()) {
      jobs_.CloseSession(worker_id_, handle_.get());
      spdlog::info("worker {} session closed", worker_id_);
    }
    delete this;
  }

 private:
  JobManager& jobs_;
  std::shared_ptr<SessionHandle> handle_;
  std::string worker_id_;
  v1::WorkerMessage incoming_;
  bool warned_long_log_ = false;
};

// A Session refused before it starts (no client certificate).
class RefusedSession : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage> {
 public:
  explicit RefusedSession(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::Status WorkerServiceImpl::CheckCaller(grpc::CallbackServerContext* context) const {
  if (authenticator_ == nullptr) return grpc::Status::OK;
  return authenticator_->CheckClientCertificate(*context);
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Register(grpc::CallbackServerContext* context,
                                                      const v1::RegisterRequest* request,
                                                      v1::RegisterResponse* response) {
  if (grpc::Status allowed = CheckCaller(context); !allowed.ok()) {
    if (metrics_ != nullptr) metrics_->CountRpc("Register", allowed.error_code());
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(allowed);
    return reactor;
  }
  const absl::Status valid = CheckRegistration(*request);
  absl::StatusOr<v1::RegisterResponse> registered =
      valid.ok() ? jobs_.RegisterWorker(*request) : absl::StatusOr<v1::RegisterResponse>(valid);
  if (registered.ok()) *response = std::move(*registered);
  const grpc::Status status = ToGrpcStatus(registered.status());
  if (metrics_ != nullptr) metrics_->CountRpc("Register", status.error_code());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* WorkerServiceImpl::Session(
    grpc::CallbackServerContext* context) {
  if (grpc::Status allowed = CheckCaller(context); !allowed.ok()) {
    if (metrics_ != nullptr) metrics_->CountRpc("Session", allowed.error_code());
    return new RefusedSession(allowed);
  }
  return new SessionReactor(jobs_, metrics_);
}

}  // namespace fsdpd::server
