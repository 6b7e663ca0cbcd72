// Bounds on what workers send, so one misbehaving process cannot fill the job store or the
// registry with oversized strings. Request sizes as a whole are capped by the gRPC server
// (CoordinatorConfig::max_receive_message_bytes); specs by ValidateJobSpec.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "fsdpd/v1/common.pb.h"
#include "fsdpd/v1/worker.pb.h"

namespace fsdpd::server {

inline constexpr size_t kMaxLogLineBytes = 16 << 10;
inline constexpr size_t kMaxLogLevelBytes = 16;
inline constexpr size_t kMaxRegistrationFieldBytes = 256;
// A cancel's reason (users) and an attempt result's error (workers): stored with the job and
// returned by every GetJob and ListJobs.
inline constexpr size_t kMaxReasonBytes = 1024;

// Cuts an over-long line at a UTF-8 character boundary and says how much was dropped; an
// over-long level becomes "info". Returns true if anything was changed.
bool CapLogLine(v1::LogLine* line);

// INVALID_ARGUMENT when a user's cancel reason is longer than kMaxReasonBytes.
absl::Status CheckCancelReason(const std::string& reason);

// Cuts text longer than `limit` bytes at a UTF-8 character boundary and says how much was
// dropped. Returns true if it was cut.
bool CapText(std::string* text, size_t limit);

// Caps what a worker's message carries that the coordinator stores: a log line (CapLogLine)
// and an attempt result's error. Returns true if anything was changed.
bool CapWorkerMessage(v1::WorkerMessage* message);

// INVALID_ARGUMENT naming the first text field longer than kMaxRegistrationFieldBytes.
absl::Status CheckRegistration(const v1::RegisterRequest& request);

}  // namespace fsdpd::server
