#include "server/input_limits.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace fsdpd::server {

bool CapLogLine(v1::LogLine* line) {
  bool changed = false;
  if (line->level().size() > kMaxLogLevelBytes) {
    line->set_level("info");
    changed = true;
  }
  std::string* text = line->mutable_text();
  if (text->size() > kMaxLogLineBytes) {
    size_t cut = kMaxLogLineBytes;
    // Backs up over UTF-8 continuation bytes (10xxxxxx) so no character is split.
    while (cut > 0 && (static_cast<unsigned char>((*text)[cut]) & 0xC0) == 0x80) --cut;
    const size_t dropped = text->size() - cut;
    text->resize(cut);
    absl::StrAppend(text, " [truncated ", dropped, " bytes]");
    changed = true;
  }
  return changed;
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
