#include "server/job_service.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/spec/job_spec.h"
#include "server/api_replies.h"
#include "server/grpc_util.h"
#include "server/input_limits.h"
#include "server/job_labels.h"

namespace fsdpd::server {
namespace {

// A WatchJob or GetJobLogs stream: buffers live events until the stored history has been
// queued, so the client sees history and live events in order with no gap and no duplicate.
template <typename Message>
class Forwarder : public JobSubscriber {
 public:
  using Writer = QueuedWriteReactor<grpc::ServerWriteReactor<Message>, Message>;
  explicit Forwarder(Writer* writer) : writer_(writer) {}

  void OnEvent(const v1::JobEvent& event) override {
    if constexpr (std::is_same_v<Message, v1::JobEvent>) Forward(event);
  }
  void OnLog(const v1::LogLine& line) override {
    if constexpr (std::is_same_v<Message, v1::LogLine>) Forward(line);
  }
  void OnEnd(const absl::Status& status) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!live_) {
      end_ = status;
      ended_ = true;
    } else if (writer_ != nullptr) {
      writer_->FinishAfterDrain(ToGrpcStatus(status));
    }
  }

  // Queues the history, then whatever arrived meanwhile, and goes live.
  void Start(const std::vector<Message>& history, bool ended) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (writer_ == nullptr) return;
    for (const Message& message : history) writer_->Enqueue(message);
    for (Message& message : backlog_) writer_->Enqueue(std::move(message));
    backlog_.clear();
    live_ = true;
    if (ended) {
      writer_->FinishAfterDrain(grpc::Status::OK);
    } else if (ended_) {
      writer_->FinishAfterDrain(ToGrpcStatus(end_));
    }
  }

  void Detach() {
    std::lock_guard<std::mutex> lock(mutex_);
    writer_ = nullptr;
  }

 private:
  void Forward(const Message& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!live_) {
      backlog_.push_back(message);
    } else if (writer_ != nullptr) {
      writer_->Enqueue(message);
    }
  }

  std::mutex mutex_;
  Writer* writer_;
  bool live_ = false;
  bool ended_ = false;
  absl::Status end_;
  std::vector<Message> backlog_;
};

template <typename Message>
class FollowStream : public QueuedWriteReactor<grpc::ServerWriteReactor<Message>, Message> {
 public:
  FollowStream(JobManager& jobs, std::string job_id)
      : jobs_(jobs),
        job_id_(std::move(job_id)),
        forwarder_(std::make_shared<Forwarder<Message>>(this)) {}
  std::shared_ptr<Forwarder<Message>> forwarder() const { return forwarder_; }

  void OnDone() override {
    forwarder_->Detach();
    jobs_.Unsubscribe(job_id_, forwarder_.get());
    delete this;
  }

 private:
  JobManager& jobs_;
  const std::string job_id_;
  std::shared_ptr<Forwarder<Message>> forwarder_;
};

// Streams one file in chunks, reading the next chunk when the previous one is written.
class FileStream : public grpc::ServerWriteReactor<v1::FileChunk> {
 public:
  FileStream(const std::string& path, std::function<void(grpc::StatusCode)> on_finish)
      : file_(path, std::ios::binary), on_finish_(std::move(on_finish)) {
    if (!file_.is_open()) {
      Done(grpc::Status(grpc::StatusCode::NOT_FOUND, path + " cannot be opened"));
      return;
    }
    file_.seekg(0, std::ios::end);
    total_ = file_.tellg();
    file_.seekg(0);
    WriteNext();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return Done(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
    WriteNext();
  }
  void OnDone() override { delete this; }

 private:
  static constexpr int64_t kChunkBytes = 1 << 20;
  void WriteNext() {
    if (sent_any_ && offset_ >= total_) return Done(grpc::Status::OK);
    std::string data(static_cast<size_t>(std::min(kChunkBytes, total_ - offset_)), '\0');
    file_.read(data.data(), static_cast<std::streamsize>(data.size()));
    if (!file_) return Done(grpc::Status(grpc::StatusCode::DATA_LOSS, "cannot read the artifact"));
    chunk_.set_data(std::move(data));
    chunk_.set_offset(offset_);
    chunk_.set_total_bytes(total_);
    offset_ += static_cast<int64_t>(chunk_.data().size());
    sent_any_ = true;  // an empty file is sent as one empty chunk
    StartWrite(&chunk_);
  }
  void Done(const grpc::Status& status) {
    if (on_finish_) on_finish_(status.error_code());
    Finish(status);
  }
  std::ifstream file_;
  int64_t total_ = 0;
  int64_t offset_ = 0;
  bool sent_any_ = false;
  v1::FileChunk chunk_;
  std::function<void(grpc::StatusCode)> on_finish_;
};

template <typename Message>
grpc::ServerWriteReactor<Message>* FailedStream(const grpc::Status& status,
                                                std::function<void(grpc::StatusCode)> count) {
  class Failed : public grpc::ServerWriteReactor<Message> {
   public:
    explicit Failed(const grpc::Status& status) { this->Finish(status); }
    void OnDone() override { delete this; }
  };
  if (count) count(status.error_code());
  return new Failed(status);
}

// Every request that names a job names it in `id`: an empty one is INVALID_ARGUMENT, not a
// job that is not found.
grpc::Status CheckJobId(const std::string& id) {
  if (!id.empty()) return grpc::Status::OK;
  return InvalidArgument("id", "must name a job (e.g. job-000001; fsdpctl list shows them)");
}

}  // namespace

std::function<void(grpc::StatusCode)> JobServiceImpl::Counter(const char* method) {
  if (metrics_ == nullptr) return nullptr;
  MetricsExporter* metrics = metrics_;
  return [metrics, method](grpc::StatusCode code) { metrics->CountRpc(method, code); };
}

grpc::Status JobServiceImpl::Authorize(grpc::CallbackServerContext* context, Role needed,
                                       const char* method) const {
  if (authenticator_ == nullptr) return grpc::Status::OK;
  return authenticator_->Authorize(*context, needed, method);
}

grpc::Status JobServiceImpl::Identify(grpc::CallbackServerContext* context, Role needed,
                                      const char* method, Caller* caller) const {
  if (authenticator_ == nullptr) {
    *caller = Caller{};
    return grpc::Status::OK;
  }
  return authenticator_->Identify(*context, needed, method, caller);
}

grpc::Status JobServiceImpl::CheckOwner(const Caller& caller, const std::string& job_id,
                                        const char* method) const {
  if (caller.role == Role::kAdmin) return grpc::Status::OK;
  absl::StatusOr<v1::Job> job = jobs_.Get(job_id);
  if (!job.ok()) return ToGrpcStatus(job.status());
  if (job->owner() == caller.principal) return grpc::Status::OK;
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat(method, ": job ", job_id, " belongs to ",
                   job->owner().empty() ? "nobody (submitted without a token)" : job->owner(),
                   "; a ", RoleName(caller.role),
                   " may act only on its own jobs, an admin on every job"));
}

grpc::ServerUnaryReactor* JobServiceImpl::Reply(grpc::CallbackServerContext* context,
                                                const char* method, const grpc::Status& status) {
  if (metrics_ != nullptr) metrics_->CountRpc(method, status.error_code());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::SubmitJob(grpc::CallbackServerContext* context,
                                                    const v1::SubmitJobRequest* request,
                                                    v1::SubmitJobResponse* response) {
  Caller caller;
  if (grpc::Status allowed = Identify(context, Role::kSubmitter, "SubmitJob", &caller);
      !allowed.ok()) {
    return Reply(context, "SubmitJob", allowed);
  }
  // Defaults belong to the coordinator: what the client left unset takes its default here, so
  // the stored spec is the one the job runs with.
  v1::JobSpec spec = request->spec();
  ApplyJobSpecDefaults(&spec);
  if (request->dry_run()) {
    // A dry run answers OK and lists the violations, so a client can show all of them.
    std::vector<FieldError> checked = jobs_.CheckSpec(spec, caller.role);
    for (FieldError& error : ValidateLabels(LabelsOf(request->labels()))) {
      checked.push_back(std::move(error));
    }
    for (const FieldError& error : checked) {
      v1::FieldViolation* violation = response->add_violations();
      violation->set_field(error.field);
      violation->set_description(error.message);
    }
    *response->mutable_job()->mutable_spec() = std::move(spec);
    return Reply(context, "SubmitJob", grpc::Status::OK);
  }
  // Starting from a job's weights reads them, as an export does: its owner's or an admin's
  // right. An unknown source job is left to Submit, which names the field.
  if (request->origin().has_weights_from()) {
    const std::string& source = request->origin().weights_from().job_id();
    if (absl::StatusOr<v1::Job> job = jobs_.Get(source); job.ok()) {
      if (grpc::Status owned = CheckOwner(caller, source, "SubmitJob --from"); !owned.ok()) {
        return Reply(context, "SubmitJob", owned);
      }
    }
  }
  // Submit checks the spec (once); a bad one comes back as its field errors.
  std::vector<FieldError> errors;
  SubmitDetails details;
  details.labels = LabelsOf(request->labels());
  details.origin = request->origin();
  absl::StatusOr<std::string> id =
      jobs_.Submit(spec, caller.principal, &errors, caller.role, details);
  if (!errors.empty()) return Reply(context, "SubmitJob", InvalidArgument(errors));
  if (!id.ok()) return Reply(context, "SubmitJob", ToGrpcStatus(id.status()));
  response->set_id(*id);
  absl::StatusOr<v1::Job> job = jobs_.Get(*id);
  if (job.ok()) {
    *response->mutable_job() = std::move(*job);
    SetJobTimestamps(response->mutable_job());
  }
  return Reply(context, "SubmitJob", grpc::Status::OK);
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* context,
                                                 const v1::GetJobRequest* request,
                                                 v1::Job* response) {
  if (grpc::Status allowed = Authorize(context, Role::kViewer, "GetJob"); !allowed.ok()) {
    return Reply(context, "GetJob", allowed);
  }
  if (grpc::Status id = CheckJobId(request->id()); !id.ok()) return Reply(context, "GetJob", id);
  absl::StatusOr<v1::Job> job = jobs_.Get(request->id());
  if (job.ok()) {
    *response = std::move(*job);
    SetJobTimestamps(response);
  }
  return Reply(context, "GetJob", ToGrpcStatus(job.status()));
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* context,
                                                   const v1::ListJobsRequest* request,
                                                   v1::ListJobsResponse* response) {
  if (grpc::Status allowed = Authorize(context, Role::kViewer, "ListJobs"); !allowed.ok()) {
    return Reply(context, "ListJobs", allowed);
  }
  std::vector<FieldError> errors;
  if (request->limit() < 0) errors.push_back({"limit", "must not be negative"});
  if (request->page_size() < 0) errors.push_back({"page_size", "must not be negative"});
  const Labels selector = LabelsOf(request->labels());
  for (FieldError& error : ValidateLabels(selector)) errors.push_back(std::move(error));
  if (!errors.empty()) return Reply(context, "ListJobs", InvalidArgument(errors));
  std::vector<v1::JobState> states;
  for (int state : request->states()) states.push_back(static_cast<v1::JobState>(state));
  // page_size (or the older limit) cuts the newest-first order, so every job is listed first.
  const int page_size = request->page_size() > 0 ? request->page_size() : request->limit();
  std::vector<v1::Job> listed = jobs_.ListHeaders(states);
  if (!selector.empty()) {
    listed.erase(std::remove_if(listed.begin(), listed.end(),
                                [&](const v1::Job& job) { return !MatchesLabels(job, selector); }),
                 listed.end());
  }
  absl::StatusOr<JobPage> page =
      PageJobsNewestFirst(std::move(listed), page_size, request->page_token());
  if (!page.ok()) {
    return Reply(context, "ListJobs",
                 InvalidArgument("page_token", std::string(page.status().message())));
  }
  for (const v1::Job& header : page->jobs) {
    absl::StatusOr<v1::Job> job = jobs_.Get(header.id());
    if (!job.ok()) continue;  // not expected: a published job is never removed
    SetJobTimestamps(&*job);
    *response->add_jobs() = std::move(*job);
  }
  response->set_next_page_token(page->next_page_token);
  return Reply(context, "ListJobs", grpc::Status::OK);
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(grpc::CallbackServerContext* context,
                                                    const v1::CancelJobRequest* request,
                                                    v1::Job* response) {
  Caller caller;
  grpc::Status allowed = Identify(context, Role::kSubmitter, "CancelJob", &caller);
  if (allowed.ok()) allowed = CheckJobId(request->id());
  if (allowed.ok()) allowed = ToGrpcStatus(CheckCancelReason(request->reason()));
  if (allowed.ok()) allowed = CheckOwner(caller, request->id(), "CancelJob");
  if (!allowed.ok()) return Reply(context, "CancelJob", allowed);
  absl::StatusOr<v1::Job> job = jobs_.Cancel(request->id(), request->reason(), caller.principal);
  if (job.ok()) {
    *response = std::move(*job);
    SetJobTimestamps(response);
  }
  return Reply(context, "CancelJob", ToGrpcStatus(job.status()));
}

grpc::ServerWriteReactor<v1::JobEvent>* JobServiceImpl::WatchJob(
    grpc::CallbackServerContext* context, const v1::WatchJobRequest* request) {
  if (grpc::Status allowed = Authorize(context, Role::kViewer, "WatchJob"); !allowed.ok()) {
    return FailedStream<v1::JobEvent>(allowed, Counter("WatchJob"));
  }
  if (grpc::Status id = CheckJobId(request->id()); !id.ok()) {
    return FailedStream<v1::JobEvent>(id, Counter("WatchJob"));
  }
  auto* stream = new FollowStream<v1::JobEvent>(jobs_, request->id());
  stream->SetOnFinish(Counter("WatchJob"));
  absl::StatusOr<JobManager::History> history = jobs_.Watch(request->id(), stream->forwarder());
  if (!history.ok()) {
    stream->FinishAfterDrain(ToGrpcStatus(history.status()));
    return stream;
  }
  stream->forwarder()->Start(history->events, history->ended);
  return stream;
}

grpc::ServerWriteReactor<v1::LogLine>* JobServiceImpl::GetJobLogs(
    grpc::CallbackServerContext* context, const v1::GetJobLogsRequest* request) {
  if (grpc::Status allowed = Authorize(context, Role::kViewer, "GetJobLogs"); !allowed.ok()) {
    return FailedStream<v1::LogLine>(allowed, Counter("GetJobLogs"));
  }
  if (grpc::Status id = CheckJobId(request->id()); !id.ok()) {
    return FailedStream<v1::LogLine>(id, Counter("GetJobLogs"));
  }
  if (request->tail() < 0) {
    return FailedStream<v1::LogLine>(InvalidArgument("tail", "must not be negative"),
                                     Counter("GetJobLogs"));
  }
  auto* stream = new FollowStream<v1::LogLine>(jobs_, request->id());
  stream->SetOnFinish(Counter("GetJobLogs"));
  absl::StatusOr<JobManager::History> history =
      jobs_.Logs(request->id(), request->tail(), request->follow() ? stream->forwarder() : nullptr);
  if (!history.ok()) {
    stream->FinishAfterDrain(ToGrpcStatus(history.status()));
    return stream;
  }
  stream->forwarder()->Start(history->logs, history->ended || !request->follow());
  return stream;
}

grpc::ServerUnaryReactor* JobServiceImpl::ListWorkers(grpc::CallbackServerContext* context,
                                                      const v1::ListWorkersRequest* request,
                                                      v1::ListWorkersResponse* response) {
  if (grpc::Status allowed = Authorize(context, Role::kViewer, "ListWorkers"); !allowed.ok()) {
    return Reply(context, "ListWorkers", allowed);
  }
  for (v1::Worker& worker : workers_.List()) *response->add_workers() = std::move(worker);
  return Reply(context, "ListWorkers", grpc::Status::OK);
}

grpc::ServerWriteReactor<v1::FileChunk>* JobServiceImpl::ExportJob(
    grpc::CallbackServerContext* context, const v1::ExportJobRequest* request) {
  // A job's weights are its owner's (and an admin's) to read, as its output files would be;
  // the job itself stays visible to every viewer.
  Caller caller;
  grpc::Status allowed = Identify(context, Role::kSubmitter, "ExportJob", &caller);
  if (allowed.ok()) allowed = CheckJobId(request->id());
  if (allowed.ok()) allowed = CheckOwner(caller, request->id(), "ExportJob");
  if (!allowed.ok()) return FailedStream<v1::FileChunk>(allowed, Counter("ExportJob"));
  absl::StatusOr<v1::Job> job = jobs_.Get(request->id());
  if (!job.ok())
    return FailedStream<v1::FileChunk>(ToGrpcStatus(job.status()), Counter("ExportJob"));
  if (request->step() < 0) {
    return FailedStream<v1::FileChunk>(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     absl::StrCat("step must not be negative (got ", request->step(), ")")),
        Counter("ExportJob"));
  }
  if (request->step() > 0) {
    // A checkpoint's export, whatever the job's state, once PrepareExport made it.
    absl::StatusOr<std::string> path = jobs_.CheckpointExportPath(request->id(), request->step());
    if (!path.ok()) {
      return FailedStream<v1::FileChunk>(ToGrpcStatus(path.status()), Counter("ExportJob"));
    }
    return new FileStream(*path, Counter("ExportJob"));
  }
  // The weights are exported when the job ends; until then there is nothing to export yet.
  if (!IsTerminal(job->state())) {
    return FailedStream<v1::FileChunk>(
        grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                     absl::StrCat("job ", request->id(), " is ", v1::JobState_Name(job->state()),
                                  ": its weights are exported once it has finished")),
        Counter("ExportJob"));
  }
  absl::StatusOr<std::string> path =
      jobs_.artifacts().Find(request->id(), ArtifactStore::kModelArtifact);
  if (!path.ok()) {
    return FailedStream<v1::FileChunk>(ToGrpcStatus(path.status()), Counter("ExportJob"));
  }
  return new FileStream(*path, Counter("ExportJob"));
}

grpc::ServerUnaryReactor* JobServiceImpl::ListCheckpoints(grpc::CallbackServerContext* context,
                                                          const v1::ListCheckpointsRequest* request,
                                                          v1::ListCheckpointsResponse* response) {
  if (grpc::Status allowed = Authorize(context, Role::kViewer, "ListCheckpoints"); !allowed.ok()) {
    return Reply(context, "ListCheckpoints", allowed);
  }
  if (grpc::Status id = CheckJobId(request->id()); !id.ok()) {
    return Reply(context, "ListCheckpoints", id);
  }
  absl::StatusOr<std::vector<CheckpointRecord>> checkpoints = jobs_.ListCheckpoints(request->id());
  if (checkpoints.ok()) {
    for (const CheckpointRecord& record : *checkpoints) {
      v1::Checkpoint* checkpoint = response->add_checkpoints();
      checkpoint->set_step(record.step);
      if (record.commit_unix_millis > 0) {
        checkpoint->mutable_commit_time()->set_seconds(record.commit_unix_millis / 1000);
        checkpoint->mutable_commit_time()->set_nanos(
            static_cast<int32_t>(record.commit_unix_millis % 1000) * 1000000);
      }
      checkpoint->set_size_bytes(record.size_bytes);
      for (const std::string& host : record.hosts) checkpoint->add_hosts(host);
      checkpoint->set_attempt(record.attempt);
      checkpoint->set_world_size(record.world_size);
    }
  }
  return Reply(context, "ListCheckpoints", ToGrpcStatus(checkpoints.status()));
}

grpc::ServerUnaryReactor* JobServiceImpl::PrepareExport(grpc::CallbackServerContext* context,
                                                        const v1::PrepareExportRequest* request,
                                                        v1::ExportStatus* response) {
  // As ExportJob: the job's owner or an admin. The worker it may occupy is bounded to one
  // export per job and step.
  Caller caller;
  grpc::Status allowed = Identify(context, Role::kSubmitter, "PrepareExport", &caller);
  if (allowed.ok()) allowed = CheckJobId(request->id());
  if (allowed.ok()) allowed = CheckOwner(caller, request->id(), "PrepareExport");
  if (!allowed.ok()) return Reply(context, "PrepareExport", allowed);
  absl::StatusOr<v1::ExportStatus> status = jobs_.PrepareExport(request->id(), request->step());
  if (status.ok()) *response = std::move(*status);
  return Reply(context, "PrepareExport", ToGrpcStatus(status.status()));
}

grpc::ServerUnaryReactor* JobServiceImpl::StartProfile(grpc::CallbackServerContext* context,
                                                       const v1::ProfileRequest* request,
                                                       v1::StartProfileResponse* response) {
  // `id` names the job as in every other request; `job_id` is what older clients send.
  v1::ProfileRequest normalized = *request;
  if (!normalized.id().empty()) normalized.set_job_id(normalized.id());
  normalized.clear_id();
  Caller caller;
  grpc::Status allowed = Identify(context, Role::kSubmitter, "StartProfile", &caller);
  if (allowed.ok()) allowed = CheckJobId(normalized.job_id());
  if (allowed.ok()) allowed = CheckOwner(caller, normalized.job_id(), "StartProfile");
  if (!allowed.ok()) return Reply(context, "StartProfile", allowed);
  return Reply(context, "StartProfile", ToGrpcStatus(jobs_.StartProfile(normalized)));
}

grpc::ServerUnaryReactor* JobServiceImpl::GetProfile(grpc::CallbackServerContext* context,
                                                     const v1::GetProfileRequest* request,
                                                     v1::ProfileReport* response) {
  if (grpc::Status allowed = Authorize(context, Role::kViewer, "GetProfile"); !allowed.ok()) {
    return Reply(context, "GetProfile", allowed);
  }
  if (grpc::Status id = CheckJobId(request->id()); !id.ok()) {
    return Reply(context, "GetProfile", id);
  }
  absl::StatusOr<v1::Job> job = jobs_.Get(request->id());
  if (!job.ok()) return Reply(context, "GetProfile", ToGrpcStatus(job.status()));
  absl::StatusOr<v1::ProfileReport> report =
      jobs_.profiles().KernelTable(request->id(), request->rank());
  if (absl::IsNotFound(report.status())) {
    return Reply(context, "GetProfile", NoProfileWindow(*job, request->rank(), "profile"));
  }
  if (report.ok()) *response = std::move(*report);
  return Reply(context, "GetProfile", ToGrpcStatus(report.status()));
}

grpc::ServerWriteReactor<v1::FileChunk>* JobServiceImpl::GetTrace(
    grpc::CallbackServerContext* context, const v1::GetTraceRequest* request) {
  if (grpc::Status allowed = Authorize(context, Role::kViewer, "GetTrace"); !allowed.ok()) {
    return FailedStream<v1::FileChunk>(allowed, Counter("GetTrace"));
  }
  if (grpc::Status id = CheckJobId(request->id()); !id.ok()) {
    return FailedStream<v1::FileChunk>(id, Counter("GetTrace"));
  }
  absl::StatusOr<v1::Job> job = jobs_.Get(request->id());
  if (!job.ok())
    return FailedStream<v1::FileChunk>(ToGrpcStatus(job.status()), Counter("GetTrace"));
  absl::StatusOr<std::string> path = jobs_.profiles().TracePath(request->id(), request->rank());
  if (absl::IsNotFound(path.status())) {
    return FailedStream<v1::FileChunk>(NoProfileWindow(*job, request->rank(), "complete trace"),
                                       Counter("GetTrace"));
  }
  if (!path.ok()) {
    return FailedStream<v1::FileChunk>(ToGrpcStatus(path.status()), Counter("GetTrace"));
  }
  return new FileStream(*path, Counter("GetTrace"));
}

}  // namespace fsdpd::server
