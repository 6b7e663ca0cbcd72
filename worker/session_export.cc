#include "worker/session_export.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/path_component.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"
#include "worker/checkpoint/consolidate.h"
#include "worker/data/path_policy.h"
#include "worker/model/model_config.h"

namespace fsdpd {
namespace {

// The checkpoint folder of the request's job, confined like a job's own, and the file to write.
absl::StatusOr<int64_t> Export(const v1::ExportRequest& request, const std::string& checkpoint_root,
                               std::vector<std::string> allowed_roots, std::string* path) {
  FSDPD_RETURN_IF_ERROR(CheckPathComponent("job uid", request.job_uid()));
  FSDPD_RETURN_IF_ERROR(CheckPathComponent("artifact name", request.artifact_name()));
  if (request.step() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("invalid step ", request.step()));
  }
  if (!allowed_roots.empty()) allowed_roots.push_back(checkpoint_root);
  FSDPD_ASSIGN_OR_RETURN(
      const std::string job_dir,
      ResolveConfinedPath((std::filesystem::path(checkpoint_root) / request.job_uid()).string(),
                          allowed_roots));
  *path = (std::filesystem::path(job_dir) / request.artifact_name()).string();
  return ExportCheckpoint(job_dir, request.step(), ModelConfigFromSpec(request.model()), *path);
}

}  // namespace

FinishedExport RefusedExport(const v1::ExportRequest& request, const std::string& why) {
  FinishedExport finished;
  finished.result.set_job_id(request.job_id());
  finished.result.set_step(request.step());
  finished.result.set_artifact_name(request.artifact_name());
  finished.result.set_ok(false);
  finished.result.set_error(why);
  return finished;
}

ExportRun::ExportRun(v1::ExportRequest request, std::string checkpoint_root,
                     std::vector<std::string> allowed_roots, Outbox* outbox)
    : request_(std::move(request)),
      checkpoint_root_(std::move(checkpoint_root)),
      allowed_roots_(std::move(allowed_roots)),
      outbox_(outbox) {}

ExportRun::~ExportRun() {
  if (thread_.joinable()) thread_.join();
}

void ExportRun::Start() {
  thread_ = std::thread([this] { Body(); });
}

void ExportRun::Body() {
  spdlog::info("job {}: exporting the checkpoint of step {}", request_.job_id(), request_.step());
  std::string path;
  absl::StatusOr<int64_t> size = Export(request_, checkpoint_root_, allowed_roots_, &path);
  FinishedExport finished;
  if (size.ok()) {
    spdlog::info("job {}: consolidated step {} into {} ({} bytes)", request_.job_id(),
                 request_.step(), path, *size);
    finished.result.set_job_id(request_.job_id());
    finished.result.set_step(request_.step());
    finished.result.set_artifact_name(request_.artifact_name());
    finished.result.set_ok(true);
    finished.result.set_size_bytes(*size);
    finished.artifact_path = path;
  } else {
    spdlog::error("job {}: exporting step {} failed: {}", request_.job_id(), request_.step(),
                  size.status().ToString());
    finished = RefusedExport(request_, std::string(size.status().message()));
  }
  outbox_->PushExport(std::move(finished));
  finished_.store(true);
  outbox_->Wake();
}

}  // namespace fsdpd
