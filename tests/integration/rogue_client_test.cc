// An attacker on the same host, playing against a real fsdpd with --tokens-file through the
// generated gRPC stubs: no credential, a user's token where a worker's is needed, a valid worker
// token of its own (another host's credential), another user's token. Each attack is refused
// with its code, while real fsdpd-worker processes and fsdpctl users keep working through all
// of it.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fsdpd/v1/jobs.grpc.pb.h"
#include "fsdpd/v1/rendezvous.grpc.pb.h"
#include "fsdpd/v1/worker.grpc.pb.h"
#include "tests/integration/process_harness.h"

namespace fsdpd::testing {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kAlice[] = "alice-token-0123456789";
constexpr char kBob[] = "bob-token-0123456789";
constexpr char kAdmin[] = "admin-token-0123456789";
constexpr char kRogueWorker[] = "rogue-worker-token-0123456789";
// The coordinator's --register-rate: registrations a second per peer host, with a burst of
// twice that (server/worker_service.cc). --max-workers is far above what a test registers, so
// only the rate refuses.
constexpr int kRegisterRate = 5;
constexpr int kRegisterBurst = 2 * kRegisterRate;

class RogueClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    IsolateClientEnvironment(dir_.path());
    data_root_ = dir_.path() + "/data";
    std::filesystem::create_directories(data_root_);
    const std::string tokens_file = dir_.path() + "/tokens";
    WriteFile(tokens_file,
              HashTokenLine(dir_.path(), kAlice, "submitter", "alice") +
                  HashTokenLine(dir_.path(), kBob, "submitter", "bob") +
                  HashTokenLine(dir_.path(), kAdmin, "admin", "admin") +
                  HashTokenLine(dir_.path(), "host-a-token-0123456789", "worker", "host-a") +
                  HashTokenLine(dir_.path(), "host-b-token-0123456789", "worker", "host-b") +
                  HashTokenLine(dir_.path(), kRogueWorker, "worker", "rogue"));
    coordinator_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildPath("server/fsdpd"), "--listen", "127.0.0.1:0",
                                 "--metrics-listen", "", "--state-dir", dir_.path() + "/state",
                                 "--tokens-file", tokens_file, "--heartbeat-timeout", "5s",
                                 "--max-workers", "1000", "--register-rate",
                                 std::to_string(kRegisterRate)},
        dir_.path() + "/fsdpd.log");
    address_ = coordinator_->WaitForAddress("fsdpd listening on ", seconds(30));
    ASSERT_FALSE(address_.empty()) << ReadFile(dir_.path() + "/fsdpd.log");
    channel_ = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  }

  // A real worker with its own credential, confined to data_root_.
  void StartWorker(const std::string& host) {
    const std::string token_file = dir_.path() + "/" + host + ".token";
    WriteFile(token_file, host + "-token-0123456789\n");
    workers_.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildPath("worker/fsdpd-worker"), "--coordinator", address_,
                                 "--device", "cpu", "--checkpoint-root",
                                 dir_.path() + "/checkpoints", "--hostname", host,
                                 "--heartbeat-interval", "500ms", "--token-file", token_file,
                                 "--allowed-root", data_root_},
        dir_.path() + "/" + host + ".log"));
  }

  CommandResult Ctl(const std::string& token, std::vector<std::string> args) {
    const std::string token_file = dir_.path() + "/ctl.token";
    WriteFile(token_file, token + std::string("\n"));
    args.insert(args.begin(), {BuildPath("client/fsdpctl"), "--coordinator", address_,
                               "--token-file", token_file});
    return RunCommand(args, seconds(30));
  }
  nlohmann::json Status(const std::string& job_id) {
    CommandResult result = Ctl(kAdmin, {"--json", "status", job_id});
    EXPECT_EQ(result.exit_code, 0) << result.err;
    nlohmann::json status = nlohmann::json::parse(result.out, nullptr, false);
    return status.is_object() ? status : nlohmann::json::object();
  }
  std::string Submit(const std::string& token, const std::string& name, const std::string& yaml) {
    const std::string path = dir_.path() + "/" + name + ".yaml";
    WriteFile(path, yaml);
    CommandResult result = Ctl(token, {"--json", "submit", path});
    EXPECT_EQ(result.exit_code, 0) << result.err;
    nlohmann::json out = nlohmann::json::parse(result.out, nullptr, false);
    return out.is_object() ? out.value("id", "") : "";
  }
  nlohmann::json WaitFor(const std::string& job_id, const std::string& state) {
    nlohmann::json status;
    for (int i = 0; i < 600; ++i) {
      status = Status(job_id);
      if (status.value("state", "") == state) return status;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << job_id << " never reached " << state << ": " << status.dump() << "\n"
                  << ReadFile(dir_.path() + "/fsdpd.log");
    return status;
  }

  // A context carrying `Bearer token` (none when token is empty), with a deadline.
  static std::unique_ptr<grpc::ClientContext> Context(const std::string& token) {
    auto context = std::make_unique<grpc::ClientContext>();
    if (!token.empty()) context->AddMetadata("authorization", "Bearer " + token);
    context->set_deadline(std::chrono::system_clock::now() + seconds(10));
    return context;
  }
  grpc::StatusCode Register(const std::string& token, const std::string& worker_id,
                            std::string* assigned = nullptr, int gpu = 0) {
    auto stub = v1::WorkerService::NewStub(channel_);
    v1::RegisterRequest request;
    request.set_worker_id(worker_id);
    request.set_hostname("rogue");
    request.set_device_kind("cpu");
    request.set_gpu_index(gpu);
    request.set_memory_bytes(1);
    request.set_address("127.0.0.1");
    v1::RegisterResponse response;
    grpc::Status status = stub->Register(Context(token).get(), request, &response);
    if (assigned != nullptr) *assigned = response.worker_id();
    return status.error_code();
  }
  grpc::Status RendezvousGet(const std::string& token, const std::string& job_id, int attempt) {
    auto stub = v1::RendezvousService::NewStub(channel_);
    v1::GetRequest request;
    request.mutable_scope()->set_job_id(job_id);
    request.mutable_scope()->set_attempt(attempt);
    request.set_key("gloo/0");
    request.set_timeout_millis(100);
    v1::GetResponse response;
    return stub->Get(Context(token).get(), request, &response);
  }
  grpc::Status RendezvousGetMany(const std::string& token, const std::string& job_id, int attempt) {
    auto stub = v1::RendezvousService::NewStub(channel_);
    v1::GetManyRequest request;
    request.mutable_scope()->set_job_id(job_id);
    request.mutable_scope()->set_attempt(attempt);
    request.add_keys()->set_key("gloo/mesh/0");
    request.set_timeout_millis(100);
    v1::GetManyResponse response;
    return stub->GetMany(Context(token).get(), request, &response);
  }
  grpc::Status RendezvousSet(const std::string& token, const std::string& job_id, int attempt) {
    auto stub = v1::RendezvousService::NewStub(channel_);
    v1::SetRequest request;
    request.mutable_scope()->set_job_id(job_id);
    request.mutable_scope()->set_attempt(attempt);
    request.set_key("rogue");
    request.set_value("x");
    v1::SetResponse response;
    return stub->Set(Context(token).get(), request, &response);
  }
  // Opens a Session as `worker_id` and returns how the coordinator ends it.
  grpc::Status OpenSession(const std::string& token, const std::string& worker_id) {
    auto stub = v1::WorkerService::NewStub(channel_);
    auto context = Context(token);
    auto stream = stub->Session(context.get());
    v1::WorkerMessage hello;
    hello.set_worker_id(worker_id);
    hello.mutable_heartbeat();
    stream->Write(hello);
    v1::CoordinatorMessage message;
    while (stream->Read(&message)) {
    }
    return stream->Finish();
  }

  TempDir dir_;
  std::string address_;
  std::string data_root_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(RogueClientTest, WorkerServicesAnswerNobodyWithoutAWorkerCredential) {
  EXPECT_EQ(Register("", ""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Register("forged-token-0123456789", ""), grpc::StatusCode::UNAUTHENTICATED);
  // A user's token is not a worker's: it cannot receive jobs and their specs.
  EXPECT_EQ(Register(kAlice, ""), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(OpenSession("", "worker-000001").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(RendezvousGet("", "job-000001", 1).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(RendezvousGetMany("", "job-000001", 1).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(RendezvousSet("", "job-000001", 1).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(RendezvousSet(kAdmin, "job-000001", 1).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // And a worker's token is no user's.
  CommandResult listed = Ctl("host-a-token-0123456789", {"list"});
  EXPECT_NE(listed.exit_code, 0);
  EXPECT_THAT(listed.err, HasSubstr("role"));
}

TEST_F(RogueClientTest, AValidWorkerCredentialCannotTakeOverIdsJobsOrRendezvous) {
  StartWorker("host-a");
  StartWorker("host-b");
  const std::string job = Submit(kAlice, "long", TinySpec("long", 1'000'000));
  ASSERT_FALSE(job.empty());
  nlohmann::json running = WaitFor(job, "RUNNING");
  ASSERT_EQ(running["worker_ids"].size(), 2u) << running.dump();
  const std::string victim = running["worker_ids"][0];
  EXPECT_EQ(running.value("owner", ""), "token:alice");

  // Another host's credential cannot take the id, nor its session.
  EXPECT_EQ(Register(kRogueWorker, victim), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(OpenSession(kRogueWorker, victim).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // Registered under an id of its own, it still runs no rank of the job: the attempt's
  // rendezvous scope is closed to it.
  std::string own_id;
  ASSERT_EQ(Register(kRogueWorker, "", &own_id), grpc::StatusCode::OK);
  EXPECT_NE(own_id, victim);
  EXPECT_EQ(RendezvousGet(kRogueWorker, job, 1).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(RendezvousGetMany(kRogueWorker, job, 1).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(RendezvousSet(kRogueWorker, job, 1).error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // Another user cannot cancel alice's job, and an oversized reason is refused whole.
  CommandResult by_bob = Ctl(kBob, {"cancel", job});
  EXPECT_NE(by_bob.exit_code, 0);
  EXPECT_THAT(by_bob.err, HasSubstr("belongs to token:alice"));
  {
    auto stub = v1::JobService::NewStub(channel_);
    v1::CancelJobRequest request;
    request.set_id(job);
    request.set_reason(std::string(1 << 20, 'x'));
    v1::Job response;
    grpc::Status status = stub->CancelJob(Context(kAlice).get(), request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("reason"));
  }

  // Through all of it the job kept training on the real workers.
  const int64_t step_before = Status(job).value("step", 0);
  nlohmann::json status;
  for (int i = 0; i < 300; ++i) {
    status = Status(job);
    if (status.value("step", 0) > step_before) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(status.value("state", ""), "RUNNING") << status.dump();
  EXPECT_GT(status.value("step", 0), step_before);

  // An admin may cancel it, and the history says who did.
  CommandResult by_admin = Ctl(kAdmin, {"cancel", job});
  EXPECT_EQ(by_admin.exit_code, 0) << by_admin.err;
  nlohmann::json cancelled = WaitFor(job, "CANCELLED");
  ASSERT_FALSE(cancelled["transitions"].empty());
  EXPECT_EQ(cancelled["transitions"].front().value("actor", ""), "token:alice");
  EXPECT_EQ(cancelled["transitions"].back().value("actor", ""), "token:admin");
  CommandResult shown = Ctl(kBob, {"status", job});
  EXPECT_THAT(shown.out, HasSubstr("CANCELLED by token:admin"));

  // And the owner's next job runs to the end on the same workers.
  const std::string next = Submit(kAlice, "short", TinySpec("short", 20));
  EXPECT_EQ(WaitFor(next, "SUCCEEDED").value("owner", ""), "token:alice");
}

TEST_F(RogueClientTest, RegistrationIsRateLimitedPerPeer) {
  // One peer registers 40 new devices as fast as it can: the burst is admitted, and then only
  // what the rate refills while the calls run; every refusal names the flag. (--max-workers, the
  // bound in total, is far away here; server_worker_registry_test covers it.)
  constexpr int kCalls = 40;
  std::vector<grpc::StatusCode> codes;
  std::vector<std::string> refusals;
  const auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) {
    // A new device each time: the same one would take back its own id, adding nobody.
    auto stub = v1::WorkerService::NewStub(channel_);
    v1::RegisterRequest request;
    request.set_hostname("rogue");
    request.set_device_kind("cpu");
    request.set_gpu_index(i);
    request.set_memory_bytes(1);
    request.set_address("127.0.0.1");
    v1::RegisterResponse response;
    const grpc::Status status = stub->Register(Context(kRogueWorker).get(), request, &response);
    codes.push_back(status.error_code());
    if (!status.ok()) refusals.push_back(status.error_message());
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  int accepted = 0;
  for (int i = 0; i < kCalls; ++i) {
    if (codes[i] == grpc::StatusCode::OK) {
      ++accepted;
    } else {
      EXPECT_EQ(codes[i], grpc::StatusCode::RESOURCE_EXHAUSTED) << "call " << i;
    }
    if (i < kRegisterBurst)
      EXPECT_EQ(codes[i], grpc::StatusCode::OK) << "call " << i << " of the burst";
  }
  // The burst, plus at most what kRegisterRate a second refilled during the calls.
  const int most = kRegisterBurst + static_cast<int>(std::ceil(elapsed * kRegisterRate));
  EXPECT_GE(accepted, kRegisterBurst);
  EXPECT_LE(accepted, most) << "in " << elapsed << " s";
  ASSERT_EQ(static_cast<int>(refusals.size()), kCalls - accepted);
  ASSERT_FALSE(refusals.empty()) << kCalls << " registrations in " << elapsed << " s, none refused";
  for (const std::string& refusal : refusals) {
    EXPECT_THAT(refusal, HasSubstr("--register-rate"));
    EXPECT_THAT(refusal, HasSubstr("127.0.0.1"));
  }
  CommandResult workers = Ctl(kAdmin, {"--json", "workers"});
  ASSERT_EQ(workers.exit_code, 0) << workers.err;
  EXPECT_EQ(static_cast<int>(nlohmann::json::parse(workers.out)["workers"].size()), accepted);
}

TEST_F(RogueClientTest, PathsOutsideTheWorkersRootFailAtOnceAndSystemPathsAtSubmission) {
  StartWorker("host-a");
  StartWorker("host-b");
  // The coordinator refuses system folders before storing anything.
  const std::string etc_spec = dir_.path() + "/etc.yaml";
  std::string etc_yaml = TinySpec("etc", 5);
  const std::string checkpoint = "checkpoint: {every_steps: 0}";
  ASSERT_NE(etc_yaml.find(checkpoint), std::string::npos) << etc_yaml;
  etc_yaml.replace(etc_yaml.find(checkpoint), checkpoint.size(),
                   "checkpoint: {every_steps: 0, init_from: /etc/shadow}");
  WriteFile(etc_spec, etc_yaml);
  CommandResult refused = Ctl(kAlice, {"submit", etc_spec});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("checkpoint.init_from"));
  EXPECT_THAT(refused.err, HasSubstr("must not point into the system folder /etc"));
  CommandResult listed = Ctl(kAdmin, {"--json", "list"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_TRUE(nlohmann::json::parse(listed.out)["jobs"].empty()) << "nothing was stored";

  // A readable file outside the workers' --allowed-root fails the job once, without retries.
  const std::string outside = dir_.path() + "/outside.txt";
  WriteFile(outside, std::string(4096, 'a'));
  std::string yaml = TinySpec("outside", 5);
  yaml.replace(yaml.find("data: {source: synthetic, seq_len: 16}"),
               std::string("data: {source: synthetic, seq_len: 16}").size(),
               "data: {source: text, path: " + outside + ", seq_len: 16}");
  yaml.replace(yaml.find("vocab: 64"), std::string("vocab: 64").size(), "vocab: 256");
  yaml.replace(yaml.find("max_restarts: 0"), std::string("max_restarts: 0").size(),
               "max_restarts: 3");
  const std::string job = Submit(kAlice, "outside", yaml);
  ASSERT_FALSE(job.empty());
  nlohmann::json failed = WaitFor(job, "FAILED");
  EXPECT_EQ(failed.value("attempt", 0), 1) << failed.dump();
  EXPECT_THAT(failed.value("reason", ""), HasSubstr("outside the allowed roots"));
}

}  // namespace
}  // namespace fsdpd::testing
