// The coordinator's gRPC services on a loopback port, driven by real gRPC clients: a worker
// session, fsdpctl-like job calls, the rendezvous store, the health service and metrics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <future>
#include <thread>

#include "fsdpd/v1/jobs.grpc.pb.h"
#include "fsdpd/v1/rendezvous.grpc.pb.h"
#include "fsdpd/v1/worker.grpc.pb.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/spec/job_spec.h"
#include "server/coordinator.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_specs.h"

namespace fsdpd::server {
namespace {

using ::fsdpd::testing::TempDir;
using ::fsdpd::testing::TinyJobSpec;
using ::testing::HasSubstr;

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(directory_.path().empty());
    CoordinatorConfig config;
    config.listen = "127.0.0.1:0";
    config.state_dir = directory_.path();
    config.metrics.listen = "";
    coordinator_ = std::make_unique<Coordinator>(config);
    absl::Status started = coordinator_->Start();
    ASSERT_TRUE(started.ok()) << started;
    channel_ =
        grpc::CreateChannel(coordinator_->listen_address(), grpc::InsecureChannelCredentials());
    jobs_ = v1::JobService::NewStub(channel_);
    workers_ = v1::WorkerService::NewStub(channel_);
    rendezvous_ = v1::RendezvousService::NewStub(channel_);
  }
  void TearDown() override { coordinator_.reset(); }

  TempDir directory_{"coordinator"};
  std::unique_ptr<Coordinator> coordinator_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::WorkerService::Stub> workers_;
  std::unique_ptr<v1::RendezvousService::Stub> rendezvous_;
};

TEST_F(CoordinatorTest, RejectsBadSpecsByField) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = TinyJobSpec();
  request.mutable_spec()->mutable_parallel()->set_device("tpu");
  v1::SubmitJobResponse response;
  grpc::ClientContext context;
  grpc::Status status = jobs_->SubmitJob(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("parallel.device"));
  // The field is also a google.rpc.BadRequest violation in the status details.
  google::rpc::Status details;
  ASSERT_TRUE(details.ParseFromString(status.error_details()));
  ASSERT_EQ(details.details_size(), 1);
  google::rpc::BadRequest bad_request;
  ASSERT_TRUE(details.details(0).UnpackTo(&bad_request));
  ASSERT_EQ(bad_request.field_violations_size(), 1);
  EXPECT_EQ(bad_request.field_violations(0).field(), "parallel.device");

  request.set_dry_run(true);
  grpc::ClientContext dry_context;
  ASSERT_TRUE(jobs_->SubmitJob(&dry_context, request, &response).ok());
  ASSERT_EQ(response.violations_size(), 1);
  EXPECT_EQ(response.violations(0).field(), "parallel.device");
  EXPECT_TRUE(response.id().empty());

  v1::ListJobsResponse list;
  grpc::ClientContext list_context;
  ASSERT_TRUE(jobs_->ListJobs(&list_context, {}, &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);

  grpc::ClientContext export_context;
  v1::ExportJobRequest export_request;
  export_request.set_id("job-000404");
  auto reader = jobs_->ExportJob(&export_context, export_request);
  v1::FileChunk chunk;
  EXPECT_FALSE(reader->Read(&chunk));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(CoordinatorTest, HealthServiceReportsServing) {
  // grpc.health.v1.Health/Check with an empty request (the whole server); the answer
  // HealthCheckResponse{status: SERVING} encodes as the two bytes 0x08 0x01.
  grpc::GenericStub stub(channel_);
  grpc::ClientContext context;
  grpc::Slice empty("", 0);
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status status) { done.set_value(status); });
  ASSERT_TRUE(done.get_future().get().ok());
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

TEST_F(CoordinatorTest, JobRunsThroughAWorkerSession) {
  v1::RegisterRequest registration;
  registration.set_hostname("host-a");
  registration.set_device_kind("cpu");
  registration.set_memory_bytes(8ll << 30);
  v1::RegisterResponse registered;
  grpc::ClientContext register_context;
  ASSERT_TRUE(workers_->Register(&register_context, registration, &registered).ok());
  ASSERT_FALSE(registered.worker_id().empty());
  EXPECT_GT(registered.heartbeat_interval_millis(), 0);

  grpc::ClientContext session_context;
  auto session = workers_->Session(&session_context);
  v1::WorkerMessage hello;
  hello.set_worker_id(registered.worker_id());
  hello.mutable_heartbeat()->set_unix_millis(1);
  ASSERT_TRUE(session->Write(hello));
  v1::CoordinatorMessage incoming;
  ASSERT_TRUE(session->Read(&incoming));
  EXPECT_TRUE(incoming.has_heartbeat_ack());

  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = TinyJobSpec();
  v1::SubmitJobResponse submitted;
  grpc::ClientContext submit_context;
  ASSERT_TRUE(jobs_->SubmitJob(&submit_context, submit, &submitted).ok());
  const std::string id = submitted.id();
  EXPECT_EQ(id, "job-000001");

  ASSERT_TRUE(session->Read(&incoming));
  ASSERT_TRUE(incoming.has_assignment());
  EXPECT_EQ(incoming.assignment().job_id(), id);
  EXPECT_EQ(incoming.assignment().rank(), 0);

  // WatchJob replays what happened so far and then follows.
  auto watched = std::async(std::launch::async, [&] {
    grpc::ClientContext context;
    v1::WatchJobRequest request;
    request.set_id(id);
    auto reader = jobs_->WatchJob(&context, request);
    std::vector<v1::JobEvent> events;
    v1::JobEvent event;
    while (reader->Read(&event)) events.push_back(event);
    EXPECT_TRUE(reader->Finish().ok());
    return events;
  });

  // Rendezvous: a Get issued before the key exists completes with the value another client Sets.
  // Whether it parked on the server or arrived after the Set is not observable through gRPC; the
  // parking itself is checked deterministically against the store in server_rendezvous_test.
  v1::Scope scope;
  scope.set_job_id(id);
  scope.set_attempt(1);
  auto parked = std::async(std::launch::async, [&] {
    grpc::ClientContext context;
    v1::GetRequest request;
    *request.mutable_scope() = scope;
    request.set_key("gloo/0");
    request.set_timeout_millis(10000);
    v1::GetResponse response;
    grpc::Status status = rendezvous_->Get(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.value();
  });
  // The key does not exist yet, so the Get cannot have completed.
  EXPECT_EQ(parked.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  v1::SetRequest set;
  *set.mutable_scope() = scope;
  set.set_key("gloo/0");
  set.set_value("127.0.0.1:4000");
  v1::SetResponse set_response;
  grpc::ClientContext set_context;
  ASSERT_TRUE(rendezvous_->Set(&set_context, set, &set_response).ok());
  EXPECT_EQ(parked.get(), "127.0.0.1:4000");
  {
    grpc::ClientContext context;
    v1::GetRequest request;
    *request.mutable_scope() = scope;
    request.set_key("never-set");
    request.set_timeout_millis(100);
    v1::GetResponse response;
    EXPECT_EQ(rendezvous_->Get(&context, request, &response).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);
  }

  // Profiling: the request (naming the job in `id`, as every request does) reaches the rank
  // with the job in job_id; its kernel table and chunked trace come back.
  {
    v1::ProfileRequest request;
    request.set_id(id);
    request.set_steps(2);
    v1::StartProfileResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(jobs_->StartProfile(&context, request, &response).ok());
    ASSERT_TRUE(session->Read(&incoming));
    ASSERT_TRUE(incoming.has_profile_request());
    EXPECT_EQ(incoming.profile_request().job_id(), id);
    EXPECT_EQ(incoming.profile_request().attempt(), 1);
    EXPECT_EQ(incoming.profile_request().steps(), 2);
    grpc::ClientContext empty_context;
    EXPECT_EQ(jobs_->StartProfile(&empty_context, v1::ProfileRequest(), &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  for (int part = 0; part < 2; ++part) {
    v1::WorkerMessage message;
    v1::ProfileReport* profile = message.mutable_profile();
    profile->set_job_id(id);
    profile->set_attempt(1);
    profile->set_rank(0);
    if (part == 0) {
      v1::KernelStat* kernel = profile->add_kernels();
      kernel->set_name("gemm_bf16");
      kernel->set_total_seconds(0.5);
      kernel->set_sm_throughput_ratio(0.75);
      kernel->set_dram_throughput_ratio(-1);
    }
    profile->set_trace_chunk(part == 0 ? "{\"traceEvents\": [" : "]}");
    profile->set_trace_chunk_index(part);
    profile->set_trace_last(part == 1);
    ASSERT_TRUE(session->Write(message));
  }
  // The session is processed in order, so a later heartbeat's ack means both were stored.
  ASSERT_TRUE(session->Write(hello));
  ASSERT_TRUE(session->Read(&incoming));
  {
    v1::GetProfileRequest request;
    request.set_id(id);
    v1::ProfileReport table;
    grpc::ClientContext context;
    ASSERT_TRUE(jobs_->GetProfile(&context, request, &table).ok());
    ASSERT_EQ(table.kernels_size(), 1);
    EXPECT_EQ(table.kernels(0).name(), "gemm_bf16");
    EXPECT_TRUE(table.trace_chunk().empty());
    grpc::ClientContext trace_context;
    v1::GetTraceRequest trace_request;
    trace_request.set_id(id);
    auto reader = jobs_->GetTrace(&trace_context, trace_request);
    std::string trace;
    v1::FileChunk chunk;
    while (reader->Read(&chunk)) trace += chunk.data();
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_EQ(trace, "{\"traceEvents\": []}");
    request.set_rank(1);
    grpc::ClientContext missing_context;
    EXPECT_EQ(jobs_->GetProfile(&missing_context, request, &table).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }

  v1::WorkerMessage step;
  v1::StepReport* report = step.mutable_step();
  report->set_job_id(id);
  report->set_attempt(1);
  report->set_rank(0);
  report->set_step(1);
  report->set_loss(5.25);
  report->set_tokens_per_second(1000);
  report->set_step_seconds(0.2);
  ASSERT_TRUE(session->Write(step));

  const std::string weights = std::string(3000, 'w') + "end";
  for (int part = 0; part < 2; ++part) {
    v1::WorkerMessage upload;
    v1::ArtifactChunk* artifact = upload.mutable_artifact();
    artifact->set_job_id(id);
    artifact->set_attempt(1);
    artifact->set_name("model.safetensors");
    artifact->mutable_chunk()->set_offset(part * 2000);
    artifact->mutable_chunk()->set_data(weights.substr(part * 2000, 2000));
    artifact->mutable_chunk()->set_total_bytes(static_cast<int64_t>(weights.size()));
    artifact->set_last(part == 1);
    ASSERT_TRUE(session->Write(upload));
  }
  v1::WorkerMessage result;
  result.mutable_result()->set_job_id(id);
  result.mutable_result()->set_attempt(1);
  result.mutable_result()->set_rank(0);
  result.mutable_result()->set_ok(true);
  result.mutable_result()->set_final_step(1);
  result.mutable_result()->set_final_loss(5.25);
  ASSERT_TRUE(session->Write(result));

  std::vector<v1::JobEvent> events = watched.get();
  ASSERT_GE(events.size(), 5u);
  EXPECT_EQ(events.front().state().state(), v1::PENDING);
  EXPECT_EQ(events.back().state().state(), v1::SUCCEEDED);
  bool saw_step = false;
  for (const v1::JobEvent& event : events) {
    if (event.has_step()) {
      saw_step = true;
      EXPECT_DOUBLE_EQ(event.step().loss(), 5.25);
    }
  }
  EXPECT_TRUE(saw_step);

  grpc::ClientContext export_context;
  v1::ExportJobRequest export_request;
  export_request.set_id(id);
  auto reader = jobs_->ExportJob(&export_context, export_request);
  std::string exported;
  v1::FileChunk chunk;
  while (reader->Read(&chunk)) exported += chunk.data();
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(exported, weights);

  const std::string metrics = coordinator_->metrics()->Render();
  EXPECT_THAT(metrics, HasSubstr("fsdpd_jobs{state=\"SUCCEEDED\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("fsdpd_workers{state=\"IDLE\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("fsdpd_train_loss{job=\"job-000001\"} 5.25"));
  EXPECT_THAT(metrics, HasSubstr("fsdpd_train_step_duration_seconds_count{job=\"job-000001\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("fsdpd_rpc_requests_total{code=\"OK\",method=\"SubmitJob\"} 1"));
  // The coordinator's server times every call through the exporter's interceptor.
  EXPECT_THAT(metrics, HasSubstr("fsdpd_rpc_duration_seconds_count{method=\"SubmitJob\"} 1"));
  EXPECT_THAT(
      metrics,
      HasSubstr("fsdpd_kernel_gpu_seconds_total{job=\"job-000001\",kernel=\"gemm_bf16\"} 0.5"));
  EXPECT_THAT(metrics, HasSubstr("fsdpd_kernel_sm_throughput_ratio{job=\"job-000001\",kernel="
                                 "\"gemm_bf16\"} 0.75"));
  EXPECT_THAT(metrics, ::testing::Not(HasSubstr("fsdpd_kernel_dram_throughput_ratio{")));

  // A coordinator shutdown closes the session with UNAVAILABLE and keeps the job.
  coordinator_->Shutdown();
  while (session->Read(&incoming)) {
  }
  grpc::Status closed = session->Finish();
  EXPECT_EQ(closed.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(closed.error_message(), HasSubstr("coordinator shutting down"));
}

}  // namespace
}  // namespace fsdpd::server
