// The rendezvous store that ranks of one attempt share through the coordinator's
// RendezvousService. Every call is scoped to (job, attempt), so a restarted attempt never sees
// an earlier attempt's keys.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fsdpd/v1/rendezvous.grpc.pb.h"
#include "grpcpp/channel.h"
#include "worker/comm/key_value_store.h"

namespace fsdpd {

class CoordinatorKeyValueStore : public KeyValueStore {
 public:
  // `unavailable_grace` bounds how long a call keeps retrying while the coordinator cannot be
  // reached (it may be restarting); the ranks' own timeouts still apply on top.
  CoordinatorKeyValueStore(std::shared_ptr<grpc::Channel> channel, std::string job_id, int attempt,
                           std::chrono::milliseconds unavailable_grace = std::chrono::seconds(30));

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override;
  // One GetMany call to the coordinator.
  absl::StatusOr<std::vector<std::string>> GetMany(const std::vector<KeyPart>& keys,
                                                   std::chrono::milliseconds timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;

 private:
  v1::Scope MakeScope() const;

  std::unique_ptr<v1::RendezvousService::Stub> stub_;
  std::string job_id_;
  int attempt_;
  std::chrono::milliseconds unavailable_grace_;
};

}  // namespace fsdpd
