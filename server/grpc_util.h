// Helpers shared by the coordinator's gRPC services: status conversion and a server reactor
// with a write queue, so any thread may send on a stream without waiting for earlier writes.
#pragma once

#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

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

}  // namespace fsdpd::server
