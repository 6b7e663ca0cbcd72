// Bounds on what workers send, so one misbehaving process cannot fill the job store or the
// registry with oversized strings. Request sizes as a whole are capped by the gRPC server
// (CoordinatorConfig::max_receive_message_bytes); specs by ValidateJobSpec.
#pragma once

#include <cstddef>
#include <cstdint>
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
// A profiling window's kernel table: its rows and each row's name, unit and phase. A table
// holds one row per distinct kernel and unit (a few hundred on the seed model).
inline constexpr int kMaxProfileKernels = 20000;
inline constexpr size_t kMaxKernelNameBytes = 1024;
// A rank's Chrome trace as stored (ProfileStore): a window of a few steps is tens of MiB.
inline constexpr int64_t kMaxTraceBytes = int64_t{1} << 30;

// Cuts an over-long line at a UTF-8 character boundary and says how much was dropped; an
// over-long level becomes "info". Returns true if anything was changed.
bool CapLogLine(v1::LogLine* line);

// INVALID_ARGUMENT when a user's cancel reason is longer than kMaxReasonBytes.
absl::Status CheckCancelReason(const std::string& reason);

// Cuts text longer than `limit` bytes at a UTF-8 character boundary and says how much was
// dropped, within `limit` bytes in all. Returns true if it was cut.
bool CapText(std::string* text, size_t limit);

// Caps what a worker's message carries that the coordinator stores: a log line (CapLogLine),
// an attempt result's error, and a profile's kernel rows and their names. Returns true if
// anything was changed.
bool CapWorkerMessage(v1::WorkerMessage* message);

// INVALID_ARGUMENT naming the first text field longer than kMaxRegistrationFieldBytes.
absl::Status CheckRegistration(const v1::RegisterRequest& request);

}  // namespace fsdpd::server
