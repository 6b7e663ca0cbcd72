#include "worker/comm/coordinator_key_value_store.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/client_context.h"

namespace fsdpd {
namespace {

using Clock = std::chrono::steady_clock;

// gRPC deadlines need the system clock; waits are measured on the steady one.
// Gives the server's own wait (Get's timeout) room to answer before the client gives up.
constexpr std::chrono::milliseconds kDeadlineMargin(5000);
constexpr std::chrono::milliseconds kRetryPause(200);

absl::Status ToAbslStatus(const grpc::Status& status, const std::string& what) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("rendezvous ", what, ": ", status.error_message()));
}

// Retries a call while the coordinator is unreachable. UNAVAILABLE means the request never
// reached the service, so even Add is safe to repeat.
template <typename Call>
grpc::Status CallWithRetry(Call call, Clock::time_point give_up) {
  while (true) {
    grpc::Status status = call();
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE || Clock::now() >= give_up) {
      return status;
    }
    std::this_thread::sleep_for(kRetryPause);
  }
}

}  // namespace

CoordinatorKeyValueStore::CoordinatorKeyValueStore(std::shared_ptr<grpc::Channel> channel,
                                                   std::string job_id, int attempt,
                                                   std::chrono::milliseconds unavailable_grace)
    : stub_(v1::RendezvousService::NewStub(channel)),
      job_id_(std::move(job_id)),
      attempt_(attempt),
      unavailable_grace_(unavailable_grace) {}

v1::Scope CoordinatorKeyValueStore::MakeScope() const {
  v1::Scope scope;
  scope.set_job_id(job_id_);
  scope.set_attempt(attempt_);
  return scope;
}

absl::Status CoordinatorKeyValueStore::Set(const std::string& key, const std::string& value) {
  v1::SetRequest request;
  *request.mutable_scope() = MakeScope();
  request.set_key(key);
  request.set_value(value);
  v1::SetResponse response;
  grpc::Status status = CallWithRetry(
      [&] {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + kDeadlineMargin);
        return stub_->Set(&context, request, &response);
      },
      Clock::now() + unavailable_grace_);
  if (!status.ok()) return ToAbslStatus(status, absl::StrCat("set \"", key, "\""));
  return absl::OkStatus();
}

absl::StatusOr<std::string> CoordinatorKeyValueStore::Get(const std::string& key,
                                                          std::chrono::milliseconds timeout) {
  const Clock::time_point wait_until = Clock::now() + timeout;
  v1::GetResponse response;
  grpc::Status status = CallWithRetry(
      [&] {
        // Each retry waits only for what is left of the caller's timeout.
        auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(wait_until - Clock::now());
        left = std::max(left, std::chrono::milliseconds(1));
        v1::GetRequest request;
        *request.mutable_scope() = MakeScope();
        request.set_key(key);
        request.set_timeout_millis(left.count());
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + left + kDeadlineMargin);
        return stub_->Get(&context, request, &response);
      },
      std::min(wait_until, Clock::now() + unavailable_grace_));
  if (!status.ok()) return ToAbslStatus(status, absl::StrCat("get \"", key, "\""));
  return response.value();
}

absl::StatusOr<std::vector<std::string>> CoordinatorKeyValueStore::GetMany(
    const std::vector<KeyPart>& keys, std::chrono::milliseconds timeout) {
  const Clock::time_point wait_until = Clock::now() + timeout;
  v1::GetManyResponse response;
  grpc::Status status = CallWithRetry(
      [&] {
        auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(wait_until - Clock::now());
        left = std::max(left, std::chrono::milliseconds(1));
        v1::GetManyRequest request;
        *request.mutable_scope() = MakeScope();
        for (const KeyPart& asked : keys) {
          v1::KeyPart* key = request.add_keys();
          key->set_key(asked.key);
          key->set_part(asked.part);
          key->set_parts(asked.parts);
        }
        request.set_timeout_millis(left.count());
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + left + kDeadlineMargin);
        return stub_->GetMany(&context, request, &response);
      },
      std::min(wait_until, Clock::now() + unavailable_grace_));
  if (!status.ok()) return ToAbslStatus(status, absl::StrCat("read of ", keys.size(), " keys"));
  if (response.values_size() != static_cast<int>(keys.size())) {
    return absl::InternalError(absl::StrCat("rendezvous read of ", keys.size(),
                                            " keys: the coordinator answered ",
                                            response.values_size(), " values"));
  }
  return std::vector<std::string>(response.values().begin(), response.values().end());
}

absl::StatusOr<int64_t> CoordinatorKeyValueStore::Add(const std::string& key, int64_t delta) {
  v1::AddRequest request;
  *request.mutable_scope() = MakeScope();
  request.set_key(key);
  request.set_delta(delta);
  v1::AddResponse response;
  grpc::Status status = CallWithRetry(
      [&] {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + kDeadlineMargin);
        return stub_->Add(&context, request, &response);
      },
      Clock::now() + unavailable_grace_);
  if (!status.ok()) return ToAbslStatus(status, absl::StrCat("add \"", key, "\""));
  return response.value();
}

}  // namespace fsdpd
