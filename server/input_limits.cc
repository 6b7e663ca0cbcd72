#include "server/input_limits.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace fsdpd::server {

bool CapText(std::string* text, size_t limit) {
  if (text->size() <= limit) return false;
  // Room for the marker, so that the result stays within the limit (and capping is idempotent).
  constexpr size_t kMarkerRoom = 40;
  size_t cut = limit > kMarkerRoom ? limit - kMarkerRoom : 0;
  // Backs up over UTF-8 continuation bytes (10xxxxxx) so no character is split.
  while (cut > 0 && (static_cast<unsigned char>((*text)[cut]) & 0xC0) == 0x80) --cut;
  const size_t dropped = text->size() - cut;
  text->resize(cut);
  absl::StrAppend(text, " [truncated ", dropped, " bytes]");
  return true;
}

bool CapLogLine(v1::LogLine* line) {
  bool changed = false;
  if (line->level().size() > kMaxLogLevelBytes) {
    line->set_level("info");
    changed = true;
  }
  return CapText(line->mutable_text(), kMaxLogLineBytes) || changed;
}

absl::Status CheckCancelReason(const std::string& reason) {
  if (reason.size() <= kMaxReasonBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("reason: ", reason.size(), " bytes; at most ", kMaxReasonBytes, " are allowed"));
}

bool CapWorkerMessage(v1::WorkerMessage* message) {
  if (message->has_log()) return CapLogLine(message->mutable_log());
  if (message->has_result()) {
    return CapText(message->mutable_result()->mutable_error(), kMaxReasonBytes);
  }
  if (message->has_profile()) {
    v1::ProfileReport* profile = message->mutable_profile();
    bool changed = false;
    if (profile->kernels_size() > kMaxProfileKernels) {
      // Rows come longest first: the ones dropped are the shortest.
      profile->mutable_kernels()->DeleteSubrange(kMaxProfileKernels,
                                                 profile->kernels_size() - kMaxProfileKernels);
      changed = true;
    }
    for (v1::KernelStat& kernel : *profile->mutable_kernels()) {
      for (std::string* text : {kernel.mutable_name(), kernel.mutable_unit(),
                                kernel.mutable_phase(), kernel.mutable_remedy()}) {
        changed = CapText(text, kMaxKernelNameBytes) || changed;
      }
    }
    return changed;
  }
  return false;
}

absl::Status CheckRegistration(const v1::RegisterRequest& request) {
  const std::pair<const char*, const std::string*> fields[] = {
      {"worker_id", &request.worker_id()},
      {"hostname", &request.hostname()},
      {"device_kind", &request.device_kind()},
      {"gpu_name", &request.gpu_name()},
      {"gpu_uuid", &request.gpu_uuid()},
      {"address", &request.address()},
      {"running_job_id", &request.running_job_id()}};
  for (const auto& [name, value] : fields) {
    if (value->size() > kMaxRegistrationFieldBytes) {
      return absl::InvalidArgumentError(absl::StrCat("register: ", name, " is ", value->size(),
                                                     " bytes; at most ", kMaxRegistrationFieldBytes,
                                                     " are allowed"));
    }
  }
  return absl::OkStatus();
}

}  // namespace fsdpd::server
