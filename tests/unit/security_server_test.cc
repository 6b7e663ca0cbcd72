// The coordinator's security in process: the tokens file, bearer-token roles on the JobService,
// TLS for clients and client certificates for the worker-facing services, request size limits
// and worker input caps. Certificates are made by openssl at test time.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>

#include "fsdpd/v1/jobs.grpc.pb.h"
#include "fsdpd/v1/rendezvous.grpc.pb.h"
#include "fsdpd/v1/worker.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/spec/job_spec.h"
#include "server/auth.h"
#include "server/coordinator.h"
#include "server/input_limits.h"
#include "server/profile_store.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_specs.h"
#include "tests/unit/security_certificates.h"

namespace fsdpd::server {
namespace {

using ::testing::HasSubstr;

using ::fsdpd::testing::TempDir;
using ::fsdpd::testing::TinyJobSpec;

// --- the tokens file --------------------------------------------------------------------------

TEST(TokensFileTest, Sha256MatchesTheStandardVector) {
  // FIPS 180-2 example "abc".
  EXPECT_EQ(ToHex(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(TokensFileTest, HashTokenLinesParseBack) {
  absl::StatusOr<std::string> line = TokenLine("s3cret-token", Role::kSubmitter, "alice");
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_THAT(*line, HasSubstr(" submitter alice"));
  absl::StatusOr<std::vector<TokenEntry>> entries =
      ParseTokens("# comment\n\n" + *line + "\n", "tokens");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].digest, Sha256("s3cret-token"));
  EXPECT_EQ((*entries)[0].role, Role::kSubmitter);
  EXPECT_EQ((*entries)[0].name, "alice");
}

TEST(TokensFileTest, BadLinesNameTheLineAndTheProblem) {
  const std::string digest = ToHex(Sha256("x"));
  struct Case {
    std::string content, expected;
  } cases[] = {
      {"\n" + digest + " viewer\n", "tokens:2: expected `<sha256-hex> <role> <name>`"},
      {"abc viewer bob\n", "tokens:1: the first field must be 64 hex digits"},
      {digest + " root bob\n", "tokens:1: unknown role \"root\""},
      {digest + " viewer a\n" + digest + " admin b\n", "tokens:2: the same token is listed twice"},
  };
  for (const Case& test : cases) {
    absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokens(test.content, "tokens");
    ASSERT_FALSE(entries.ok()) << test.content;
    EXPECT_THAT(std::string(entries.status().message()), HasSubstr(test.expected));
  }
  EXPECT_FALSE(TokenLine("has space", Role::kViewer, "bob").ok());
  EXPECT_FALSE(TokenLine("", Role::kViewer, "bob").ok());
  EXPECT_FALSE(TokenLine("ok", Role::kViewer, "").ok());
}

TEST(TokensFileTest, AFileWithNoTokensIsAnError) {
  TempDir directory;
  const std::string path = directory.path() + "/tokens";
  std::ofstream(path) << "# nobody yet\n";
  absl::StatusOr<std::vector<TokenEntry>> entries = LoadTokensFile(path);
  ASSERT_FALSE(entries.ok());
  EXPECT_THAT(std::string(entries.status().message()), HasSubstr("lists no tokens"));
  EXPECT_EQ(LoadTokensFile(directory.path() + "/missing").status().code(),
            absl::StatusCode::kNotFound);
}

// --- configuration -----------------------------------------------------------------------------

TEST(SecurityConfigTest, NetworkListenNeedsTlsOrInsecure) {
  CoordinatorConfig config;
  config.state_dir = "/tmp/unused";
  config.FillPaths();
  config.listen = "0.0.0.0:7070";
  absl::Status status = config.Check();
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("--tls-cert"));
  config.tls.cert_path = "server.pem";
  config.tls.key_path = "server.key";
  EXPECT_TRUE(config.Check().ok()) << config.Check();
}

TEST(SecurityConfigTest, IncompleteTlsSettingsAreRejected) {
  CoordinatorConfig config;
  config.state_dir = "/tmp/unused";
  config.FillPaths();
  config.tls.cert_path = "server.pem";
  EXPECT_THAT(std::string(config.Check().message()), HasSubstr("must be given together"));
  config.tls.cert_path.clear();
  config.tls.client_ca_path = "ca.pem";
  EXPECT_THAT(std::string(config.Check().message()), HasSubstr("--tls-client-ca needs"));
  config.tls.client_ca_path.clear();
  config.max_receive_message_bytes = 1000;
  EXPECT_THAT(std::string(config.Check().message()), HasSubstr("max-request-bytes"));
}

TEST(SecurityConfigTest, MissingCertificateFileFailsStart) {
  TempDir directory;
  CoordinatorConfig config;
  config.listen = "127.0.0.1:0";
  config.state_dir = directory.path();
  config.metrics.listen = "";
  config.tls.cert_path = directory.path() + "/absent.pem";
  config.tls.key_path = directory.path() + "/absent.key";
  Coordinator coordinator(config);
  absl::Status status = coordinator.Start();
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("--tls-cert: cannot open"));
}

// --- bearer tokens -----------------------------------------------------------------------------

class BearerTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(directory_.path().empty());
    const std::string tokens = directory_.path() + "/tokens";
    std::ofstream file(tokens);
    file << *TokenLine("viewer-token", Role::kViewer, "vera") << "\n"
         << *TokenLine("submitter-token", Role::kSubmitter, "sam") << "\n"
         << *TokenLine("admin-token", Role::kAdmin, "ada") << "\n";
    file.close();
    CoordinatorConfig config;
    config.listen = "127.0.0.1:0";
    config.state_dir = directory_.path() + "/state";
    config.metrics.listen = "";
    config.tokens_file = tokens;
    coordinator_ = std::make_unique<Coordinator>(config);
    absl::Status started = coordinator_->Start();
    ASSERT_TRUE(started.ok()) << started;
    jobs_ = v1::JobService::NewStub(
        grpc::CreateChannel(coordinator_->listen_address(), grpc::InsecureChannelCredentials()));
  }

  grpc::Status List(const std::string& authorization) {
    grpc::ClientContext context;
    if (!authorization.empty()) context.AddMetadata("authorization", authorization);
    v1::ListJobsResponse response;
    return jobs_->ListJobs(&context, v1::ListJobsRequest(), &response);
  }
  grpc::Status Submit(const std::string& token, std::string* id) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + token);
    v1::SubmitJobRequest request;
    *request.mutable_spec() = TinyJobSpec();
    v1::SubmitJobResponse response;
    grpc::Status status = jobs_->SubmitJob(&context, request, &response);
    if (id != nullptr) *id = response.id();
    return status;
  }
  grpc::Status Cancel(const std::string& token, const std::string& id) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + token);
    v1::CancelJobRequest request;
    request.set_id(id);
    v1::Job response;
    return jobs_->CancelJob(&context, request, &response);
  }

  TempDir directory_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
};

TEST_F(BearerTokenTest, MissingTokenIsUnauthenticated) {
  grpc::Status status = List("");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(status.error_message(), HasSubstr("a bearer token is required"));
}

TEST_F(BearerTokenTest, WrongOrMalformedTokenIsUnauthenticated) {
  EXPECT_EQ(List("Bearer not-a-known-token").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(List("Basic dmlld2VyLXRva2Vu").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // The digest, not the token, is what the server stores: sending the digest must not work.
  EXPECT_EQ(List("Bearer " + ToHex(Sha256("viewer-token"))).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(BearerTokenTest, ViewerReadsButCannotSubmitOrCancel) {
  EXPECT_TRUE(List("Bearer viewer-token").ok());
  grpc::Status submit = Submit("viewer-token", nullptr);
  EXPECT_EQ(submit.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(submit.error_message(), HasSubstr("needs the role submitter"));
  EXPECT_THAT(submit.error_message(), HasSubstr("vera"));

  std::string id;
  ASSERT_TRUE(Submit("submitter-token", &id).ok());
  grpc::Status cancel = Cancel("viewer-token", id);
  EXPECT_EQ(cancel.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(cancel.error_message(), HasSubstr("CancelJob needs the role submitter"));
}

TEST_F(BearerTokenTest, SubmittersActOnTheirOwnJobsAndAdminsOnAll) {
  std::string mine, admins, third;
  ASSERT_TRUE(Submit("submitter-token", &mine).ok());
  ASSERT_TRUE(Submit("admin-token", &admins).ok());
  ASSERT_TRUE(Submit("submitter-token", &third).ok());
  grpc::Status refused = Cancel("submitter-token", admins);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(refused.error_message(), HasSubstr("belongs to token:ada"));
  EXPECT_TRUE(Cancel("submitter-token", mine).ok());
  EXPECT_TRUE(Cancel("admin-token", third).ok());

  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer viewer-token");
  v1::GetJobRequest request;
  request.set_id(third);
  v1::Job job;
  ASSERT_TRUE(jobs_->GetJob(&context, request, &job).ok());
  EXPECT_EQ(job.owner(), "token:sam");
  ASSERT_GE(job.transitions_size(), 2);
  EXPECT_EQ(job.transitions(0).actor(), "token:sam");
  EXPECT_EQ(job.transitions(job.transitions_size() - 1).state(), v1::CANCELLED);
  EXPECT_EQ(job.transitions(job.transitions_size() - 1).actor(), "token:ada");
}

// A job's weights are its output: exporting them, or starting a job from them, is its owner's
// or an admin's right, while the job itself stays visible to every viewer.
TEST_F(BearerTokenTest, OnlyTheOwnerOrAnAdminReadsAJobsWeights) {
  std::string sams, adas;
  ASSERT_TRUE(Submit("submitter-token", &sams).ok());
  ASSERT_TRUE(Submit("admin-token", &adas).ok());
  const auto prepare = [this](const std::string& token, const std::string& id) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + token);
    v1::PrepareExportRequest request;
    request.set_id(id);
    v1::ExportStatus response;
    return jobs_->PrepareExport(&context, request, &response);
  };
  const auto export_job = [this](const std::string& token, const std::string& id) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + token);
    v1::ExportJobRequest request;
    request.set_id(id);
    auto reader = jobs_->ExportJob(&context, request);
    v1::FileChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish();
  };
  const auto submit_from = [this](const std::string& token, const std::string& source) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + token);
    v1::SubmitJobRequest request;
    *request.mutable_spec() = TinyJobSpec();
    request.mutable_origin()->mutable_weights_from()->set_job_id(source);
    v1::SubmitJobResponse response;
    return jobs_->SubmitJob(&context, request, &response);
  };

  grpc::Status viewer = prepare("viewer-token", sams);
  EXPECT_EQ(viewer.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(viewer.error_message(), HasSubstr("PrepareExport needs the role submitter"));
  viewer = export_job("viewer-token", sams);
  EXPECT_EQ(viewer.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(viewer.error_message(), HasSubstr("ExportJob needs the role submitter"));

  grpc::Status foreign = prepare("submitter-token", adas);
  EXPECT_EQ(foreign.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(foreign.error_message(), HasSubstr("belongs to token:ada"));
  foreign = export_job("submitter-token", adas);
  EXPECT_EQ(foreign.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(foreign.error_message(), HasSubstr("belongs to token:ada"));
  foreign = submit_from("submitter-token", adas);
  EXPECT_EQ(foreign.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(foreign.error_message(), HasSubstr("SubmitJob --from: job " + adas));

  // The owner and an admin get past the check, to what the job itself allows: it has not run,
  // so there is nothing to export and no checkpoint to start from.
  for (const char* token : {"submitter-token", "admin-token"}) {
    SCOPED_TRACE(token);
    grpc::Status own = export_job(token, sams);
    EXPECT_EQ(own.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << own.error_message();
    own = submit_from(token, sams);
    EXPECT_EQ(own.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << own.error_message();
    EXPECT_THAT(own.error_message(), HasSubstr("has no complete checkpoint"));
  }
}

TEST_F(BearerTokenTest, CancelReasonsAreBounded) {
  std::string id;
  ASSERT_TRUE(Submit("submitter-token", &id).ok());
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer submitter-token");
  v1::CancelJobRequest request;
  request.set_id(id);
  request.set_reason(std::string(kMaxReasonBytes + 1, 'r'));
  v1::Job response;
  grpc::Status status = jobs_->CancelJob(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("reason: 1025 bytes; at most 1024"));
}

TEST_F(BearerTokenTest, StreamsAreCheckedToo) {
  grpc::ClientContext context;
  v1::WatchJobRequest request;
  request.set_id("anything");
  auto reader = jobs_->WatchJob(&context, request);
  v1::JobEvent event;
  EXPECT_FALSE(reader->Read(&event));
  grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(status.error_message(), HasSubstr("a bearer token is required"));
}

// --- TLS and client certificates ---------------------------------------------------------------

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(directory_.path().empty());
    ASSERT_TRUE(testing::MakeTestCertificates(directory_.path(), &certificates_))
        << testing::ReadTextFile(directory_.path() + "/openssl.log");
    CoordinatorConfig config;
    config.listen = "127.0.0.1:0";
    config.state_dir = directory_.path() + "/state";
    config.metrics.listen = "";
    config.tls.cert_path = certificates_.server_pem;
    config.tls.key_path = certificates_.server_key;
    config.tls.client_ca_path = certificates_.ca_pem;
    health_address_ = "127.0.0.1:" + std::to_string(FreePort());
    config.health_listen = health_address_;
    coordinator_ = std::make_unique<Coordinator>(config);
    absl::Status started = coordinator_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }

  static int FreePort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    int port = 0;
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      port = ntohs(address.sin_port);
    }
    close(fd);
    return port;
  }

  std::shared_ptr<grpc::Channel> Channel(const std::string& ca, const std::string& cert,
                                         const std::string& key) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = testing::ReadTextFile(ca);
    if (!cert.empty()) {
      options.pem_cert_chain = testing::ReadTextFile(cert);
      options.pem_private_key = testing::ReadTextFile(key);
    }
    return grpc::CreateChannel(coordinator_->listen_address(), grpc::SslCredentials(options));
  }

  static grpc::Status Register(const std::shared_ptr<grpc::Channel>& channel) {
    v1::RegisterRequest request;
    request.set_hostname("host-a");
    request.set_device_kind("cpu");
    request.set_memory_bytes(1ll << 30);
    v1::RegisterResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return v1::WorkerService::NewStub(channel)->Register(&context, request, &response);
  }
  static grpc::Status List(const std::shared_ptr<grpc::Channel>& channel) {
    v1::ListJobsResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return v1::JobService::NewStub(channel)->ListJobs(&context, v1::ListJobsRequest(), &response);
  }

  TempDir directory_;
  testing::TestCertificates certificates_;
  std::string health_address_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(TlsTest, TlsClientWithoutCertificateUsesTheJobService) {
  grpc::Status status = List(Channel(certificates_.ca_pem, "", ""));
  EXPECT_TRUE(status.ok()) << status.error_message();
}

// Probes that cannot speak TLS (Kubernetes' gRPC probes) ask the plaintext health port, which
// answers grpc.health.v1 and nothing else.
TEST_F(TlsTest, HealthPortAnswersProbesInPlaintextAndNothingElse) {
  auto channel = grpc::CreateChannel(health_address_, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  auto call = [&](const std::string& method, grpc::ByteBuffer* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Slice empty("", 0);
    grpc::ByteBuffer request(&empty, 1);
    std::promise<grpc::Status> done;
    stub.UnaryCall(&context, method, grpc::StubOptions(), &request, response,
                   [&](grpc::Status status) { done.set_value(status); });
    return done.get_future().get();
  };
  grpc::ByteBuffer health;
  ASSERT_TRUE(call("/grpc.health.v1.Health/Check", &health).ok());
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(health.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));  // HealthCheckResponse{status: SERVING}
  grpc::ByteBuffer jobs;
  EXPECT_EQ(call("/fsdpd.v1.JobService/ListJobs", &jobs).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  grpc::ByteBuffer registered;
  EXPECT_EQ(call("/fsdpd.v1.WorkerService/Register", &registered).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(TlsTest, PlaintextClientFails) {
  grpc::Status status =
      List(grpc::CreateChannel(coordinator_->listen_address(), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, ClientThatDoesNotTrustTheServerFails) {
  grpc::Status status = List(Channel(certificates_.directory + "/rogue-ca.pem", "", ""));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, WorkerWithoutClientCertificateIsRefused) {
  std::shared_ptr<grpc::Channel> channel = Channel(certificates_.ca_pem, "", "");
  grpc::Status status = Register(channel);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(status.error_message(), HasSubstr("client certificate"));

  grpc::ClientContext session_context;
  auto session = v1::WorkerService::NewStub(channel)->Session(&session_context);
  v1::CoordinatorMessage message;
  EXPECT_FALSE(session->Read(&message));
  EXPECT_EQ(session->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);

  v1::SetRequest set;
  set.mutable_scope()->set_job_id("job");
  set.set_key("k");
  set.set_value("v");
  v1::SetResponse set_response;
  grpc::ClientContext set_context;
  EXPECT_EQ(
      v1::RendezvousService::NewStub(channel)->Set(&set_context, set, &set_response).error_code(),
      grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(TlsTest, WorkerWithClientCertificateRegisters) {
  grpc::Status status =
      Register(Channel(certificates_.ca_pem, certificates_.client_pem, certificates_.client_key));
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(TlsTest, CertificateFromAnotherCaFailsTheHandshake) {
  grpc::Status status = Register(Channel(certificates_.ca_pem, certificates_.rogue_client_pem,
                                         certificates_.rogue_client_key));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

// --- limits ------------------------------------------------------------------------------------

TEST(RequestLimitTest, OversizedRequestIsRefusedBeforeParsing) {
  TempDir directory;
  CoordinatorConfig config;
  config.listen = "127.0.0.1:0";
  config.state_dir = directory.path();
  config.metrics.listen = "";
  config.max_receive_message_bytes = 2 << 20;
  Coordinator coordinator(config);
  ASSERT_TRUE(coordinator.Start().ok());
  auto jobs = v1::JobService::NewStub(
      grpc::CreateChannel(coordinator.listen_address(), grpc::InsecureChannelCredentials()));
  v1::SubmitJobRequest request;
  *request.mutable_spec() = TinyJobSpec();
  request.mutable_spec()->set_name(std::string(3 << 20, 'x'));
  v1::SubmitJobResponse response;
  grpc::ClientContext context;
  EXPECT_EQ(jobs->SubmitJob(&context, request, &response).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  // Under the limit the spec validator still bounds the name.
  request.mutable_spec()->set_name(std::string(1000, 'x'));
  grpc::ClientContext second;
  grpc::Status status = jobs->SubmitJob(&second, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("name"));
}

TEST(InputLimitTest, LongLogLinesAreCutAtACharacterBoundary) {
  v1::LogLine line;
  line.set_level("info");
  // "é" is two bytes; an odd prefix puts the cut inside a character unless it backs up.
  line.set_text("a" + [] {
    std::string text;
    for (size_t i = 0; i < kMaxLogLineBytes; ++i) text += "\xc3\xa9";
    return text;
  }());
  EXPECT_TRUE(CapLogLine(&line));
  EXPECT_LE(line.text().size(), kMaxLogLineBytes + 64);
  EXPECT_THAT(line.text(), HasSubstr("[truncated "));
  const size_t marker = line.text().find(" [truncated ");
  // What is kept is "a" plus whole characters.
  EXPECT_EQ((marker - 1) % 2, 0u);
  v1::LogLine short_line;
  short_line.set_text("fine");
  EXPECT_FALSE(CapLogLine(&short_line));
  EXPECT_EQ(short_line.text(), "fine");
}

TEST(InputLimitTest, KernelTablesAreBoundedInRowsAndNames) {
  v1::WorkerMessage message;
  v1::ProfileReport* profile = message.mutable_profile();
  for (int i = 0; i < kMaxProfileKernels + 5; ++i) profile->add_kernels()->set_name("k");
  profile->mutable_kernels(0)->set_name(std::string(kMaxKernelNameBytes * 4, 'n'));
  EXPECT_TRUE(CapWorkerMessage(&message));
  EXPECT_EQ(profile->kernels_size(), kMaxProfileKernels);
  EXPECT_LE(profile->kernels(0).name().size(), kMaxKernelNameBytes);
  EXPECT_FALSE(CapWorkerMessage(&message));  // within the bounds now
}

TEST(InputLimitTest, ATraceStopsGrowingAtItsBound) {
  TempDir directory;
  ProfileStore store(directory.path(), /*max_trace_bytes=*/100);
  v1::ProfileReport chunk;
  chunk.set_job_id("job-000001");
  chunk.set_trace_chunk(std::string(60, 't'));
  ASSERT_TRUE(store.Write(chunk).ok());
  chunk.set_trace_chunk_index(1);
  absl::Status refused = store.Write(chunk);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  chunk.set_trace_chunk_index(0);  // a new window starts over
  EXPECT_TRUE(store.Write(chunk).ok());
}

TEST(InputLimitTest, OverlongRegistrationFieldsAreNamed) {
  v1::RegisterRequest request;
  request.set_hostname(std::string(kMaxRegistrationFieldBytes + 1, 'h'));
  absl::Status status = CheckRegistration(request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("hostname"));
  request.set_hostname("ok");
  EXPECT_TRUE(CheckRegistration(request).ok());
}

}  // namespace
}  // namespace fsdpd::server
