// Bounds on what workers send, so one misbehaving process cannot fill the job store or the
// registry with oversized strings. Request sizes as a whole are capped by the gRPC server
// (CoordinatorConfig::max_receive_message_bytes); specs by ValidateJobSpec.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "fsdpd/v1/common.pb.h"
#include "fsdpd/v1/worker.pb.h"

namespace fsdpd::server {

inline constexpr size_t kMaxLogLineBytes = 16 << 10;
inline constexpr size_t kMaxLogLevelBytes = 16;
inline constexpr size_t kMaxRegistrationFieldBytes = 256;

// Cuts an over-long line at a UTF-8 character boundary and says how much was dropped; an
// over-long level becomes "info". Returns true if anything was changed.
bool CapLogLine(v1::LogLine* line);

// INVALID_ARGUMENT naming the first text field longer than kMaxRegistrationFieldBytes.
absl::Status CheckRegistration(const v1::RegisterRequest& request);

}  // namespace fsdpd::server
