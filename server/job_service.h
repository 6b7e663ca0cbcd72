// JobService, the API fsdpctl speaks, on the gRPC callback API.
#pragma once

#include "fsdpd/v1/jobs.grpc.pb.h"
#include "server/auth.h"
#include "server/job_manager.h"
#include "server/metrics_exporter.h"
#include "server/worker_registry.h"

namespace fsdpd::server {

class JobServiceImpl : public v1::JobService::CallbackService {
 public:
  // metrics and authenticator may be null (tests; null: every call is allowed).
  JobServiceImpl(JobManager& jobs, WorkerRegistry& workers, MetricsExporter* metrics,
                 const Authenticator* authenticator = nullptr)
      : jobs_(jobs), workers_(workers), metrics_(metrics), authenticator_(authenticator) {}

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* context,
                                      const v1::SubmitJobRequest* request,
                                      v1::SubmitJobResponse* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* context,
                                   const v1::GetJobRequest* request, v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* context,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* context,
                                      const v1::CancelJobRequest* request,
                                      v1::Job* response) override;
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(grpc::CallbackServerContext* context,
                                                   const v1::WatchJobRequest* request) override;
  grpc::ServerWriteReactor<v1::LogLine>* GetJobLogs(grpc::CallbackServerContext* context,
                                                    const v1::GetJobLogsRequest* request) override;
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* context,
                                        const v1::ListWorkersRequest* request,
                                        v1::ListWorkersResponse* response) override;
  grpc::ServerWriteReactor<v1::FileChunk>* ExportJob(grpc::CallbackServerContext* context,
                                                     const v1::ExportJobRequest* request) override;
  grpc::ServerUnaryReactor* StartProfile(grpc::CallbackServerContext* context,
                                         const v1::ProfileRequest* request,
                                         v1::StartProfileResponse* response) override;
  grpc::ServerUnaryReactor* GetProfile(grpc::CallbackServerContext* context,
                                       const v1::GetProfileRequest* request,
                                       v1::ProfileReport* response) override;
  grpc::ServerWriteReactor<v1::FileChunk>* GetTrace(grpc::CallbackServerContext* context,
                                                    const v1::GetTraceRequest* request) override;
  grpc::ServerUnaryReactor* ListCheckpoints(grpc::CallbackServerContext* context,
                                            const v1::ListCheckpointsRequest* request,
                                            v1::ListCheckpointsResponse* response) override;
  grpc::ServerUnaryReactor* PrepareExport(grpc::CallbackServerContext* context,
                                          const v1::PrepareExportRequest* request,
                                          v1::ExportStatus* response) override;

 private:
  grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, const char* method,
                                  const grpc::Status& status);
  std::function<void(grpc::StatusCode)> Counter(const char* method);
  grpc::Status Authorize(grpc::CallbackServerContext* context, Role needed,
                         const char* method) const;
  // As Authorize, and says who called.
  grpc::Status Identify(grpc::CallbackServerContext* context, Role needed, const char* method,
                        Caller* caller) const;
  // A verb that changes a job (cancel, profile): admins may act on every job, submitters only
  // on their own. NOT_FOUND for an unknown job, PERMISSION_DENIED naming the owner otherwise.
  grpc::Status CheckOwner(const Caller& caller, const std::string& job_id,
                          const char* method) const;

  JobManager& jobs_;
  WorkerRegistry& workers_;
  MetricsExporter* metrics_;
  const Authenticator* authenticator_;
};

}  // namespace fsdpd::server
