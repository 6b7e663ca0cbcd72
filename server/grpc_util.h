// Helpers shared by the coordinator's gRPC services: status conversion, a server reactor
// with a write queue, so any thread may send on a stream without waiting for earlier writes, and
// an interceptor that times every RPC.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/server_interceptor.h"

namespace fsdpd::server {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// Base is grpc::ServerWriteReactor<Message> or grpc::ServerBidiReactor<Request, Message>.
// Enqueue and FinishAfterDrain are thread-safe; after FinishAfterDrain nothing more is sent.
template <typename Base, typename Message>
class QueuedWriteReactor : public Base {
 public:
  // Called once with the stream's final status (for fsdpd_rpc_requests_total).
  void SetOnFinish(std::function<void(grpc::StatusCode)> on_finish) {
    on_finish_ = std::move(on_finish);
  }

  void Enqueue(Message message) {
    std::unique_lock<std::mutex> lock(write_mutex_);
    if (finishing_) return;
    queue_.push_back(std::move(message));
    if (writing_) return;
    writing_ = true;
    const Message* next = &queue_.front();
    lock.unlock();
    this->StartWrite(next);
  }

  void FinishAfterDrain(const grpc::Status& status) {
    std::unique_lock<std::mutex> lock(write_mutex_);
    if (finishing_) return;
    finishing_ = true;
    final_status_ = status;
    if (writing_) return;  // OnWriteDone finishes once the queue is written
    lock.unlock();
    CallFinish(status);
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(write_mutex_);
    queue_.pop_front();
    if (!ok) {
      // The client went away: nothing queued can be delivered.
      queue_.clear();
      writing_ = false;
      const bool already = finishing_;
      finishing_ = true;
      lock.unlock();
      if (!already) {
        CallFinish(grpc::Status(grpc::StatusCode::CANCELLED, "the client closed the stream"));
      } else {
        CallFinish(final_status_);
      }
      return;
    }
    if (!queue_.empty()) {
      const Message* next = &queue_.front();
      lock.unlock();
      this->StartWrite(next);
      return;
    }
    writing_ = false;
    const bool finish = finishing_;
    lock.unlock();
    if (finish) CallFinish(final_status_);
  }

  void OnCancel() override {
    FinishAfterDrain(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }

 private:
  void CallFinish(const grpc::Status& status) {
    {
      std::lock_guard<std::mutex> lock(write_mutex_);
      if (finish_called_) return;
      finish_called_ = true;
    }
    if (on_finish_) on_finish_(status.error_code());
    this->Finish(status);
  }

  std::mutex write_mutex_;
  std::deque<Message> queue_;  // deque: the element being written keeps its address
  bool writing_ = false;
  bool finishing_ = false;
  bool finish_called_ = false;
  grpc::Status final_status_;
  std::function<void(grpc::StatusCode)> on_finish_;
};

// What an RpcTimingInterceptor reports: the RPC's full method name ("/pkg.Service/Method"),
// whether it streams responses, and seconds since the call arrived.
struct RpcTimingObserver {
  // The call's status is being sent: the RPC is over (unary: its whole latency).
  std::function<void(const char* method, bool streaming, double seconds)> on_end;
  // A streaming RPC's first response message is being sent.
  std::function<void(const char* method, double seconds)> on_first_message;
};

// Times one call from its arrival (when gRPC creates the interceptor) to its first response
// message and to its status, through hooks every service shares, so no handler has to.
class RpcTimingInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcTimingInterceptor(grpc::experimental::ServerRpcInfo* info,
                       std::shared_ptr<const RpcTimingObserver> observer)
      : method_(info->method() != nullptr ? info->method() : ""),
        streaming_(info->type() == grpc::experimental::ServerRpcInfo::Type::SERVER_STREAMING ||
                   info->type() == grpc::experimental::ServerRpcInfo::Type::BIDI_STREAMING),
        observer_(std::move(observer)),
        start_(std::chrono::steady_clock::now()) {}

  // A call that ends without sending a status (torn down) is still timed.
  ~RpcTimingInterceptor() override {
    if (!ended_) End();
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using Hook = grpc::experimental::InterceptionHookPoints;
    if (streaming_ && !sent_message_ &&
        methods->QueryInterceptionHookPoint(Hook::PRE_SEND_MESSAGE)) {
      sent_message_ = true;
      if (observer_->on_first_message) observer_->on_first_message(method_.c_str(), Seconds());
    }
    if (!ended_ && methods->QueryInterceptionHookPoint(Hook::PRE_SEND_STATUS)) End();
    methods->Proceed();
  }

 private:
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void End() {
    ended_ = true;
    if (observer_->on_end) observer_->on_end(method_.c_str(), streaming_, Seconds());
  }

  const std::string method_;
  const bool streaming_;
  const std::shared_ptr<const RpcTimingObserver> observer_;
  const std::chrono::steady_clock::time_point start_;
  bool sent_message_ = false;
  bool ended_ = false;
};

class RpcTimingInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcTimingInterceptorFactory(RpcTimingObserver observer)
      : observer_(std::make_shared<const RpcTimingObserver>(std::move(observer))) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcTimingInterceptor(info, observer_);
  }

 private:
  std::shared_ptr<const RpcTimingObserver> observer_;
};

}  // namespace fsdpd::server
