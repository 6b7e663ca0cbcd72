// A worker credential used as an attacker would, against a real fsdpd with --tokens-file and
// real fsdpd-worker processes, through the generated gRPC stubs: a registration that claims a
// rank of another worker's job, log lines and step reports sent under that claim, a rendezvous
// scope filled past what its ranks need, and a second Session opened with a live worker's own
// credential. Each is refused, and the real job and workers never notice.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fsdpd/v1/jobs.grpc.pb.h"
#include "fsdpd/v1/rendezvous.grpc.pb.h"
#include "fsdpd/v1/worker.grpc.pb.h"
#include "tests/integration/process_harness.h"

namespace fsdpd::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kAlice[] = "alice-token-0123456789";
constexpr char kAdmin[] = "admin-token-0123456789";
constexpr char kHostA[] = "host-a-token-0123456789";
constexpr char kRogue[] = "rogue-token-0123456789";

// A context carrying `Bearer token`, with a deadline.
std::unique_ptr<grpc::ClientContext> Context(const std::string& token,
                                             milliseconds deadline = seconds(10)) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->AddMetadata("authorization", "Bearer " + token);
  context->set_deadline(std::chrono::system_clock::now() + deadline);
  return context;
}

// A Session stream spoken by hand: what the coordinator sends is collected by a reader thread.
class RawSession {
 public:
  RawSession(const std::shared_ptr<grpc::Channel>& channel, const std::string& token,
             const std::string& worker_id, milliseconds deadline = seconds(60))
      : stub_(v1::WorkerService::NewStub(channel)), context_(Context(token, deadline)) {
    stream_ = stub_->Session(context_.get());
    v1::WorkerMessage hello;
    hello.set_worker_id(worker_id);
    hello.mutable_heartbeat();
    stream_->Write(hello);
    reader_ = std::thread([this] {
      v1::CoordinatorMessage message;
      while (stream_->Read(&message)) {
        std::lock_guard<std::mutex> lock(mutex_);
        received_.push_back(message);
      }
    });
  }
  ~RawSession() { Close(); }

  bool Write(const v1::WorkerMessage& message) { return stream_->Write(message); }
  // Sends a heartbeat and waits for its ack: every message written before it has been handled.
  bool Sync() {
    size_t acks_before = Acks();
    v1::WorkerMessage beat;
    beat.mutable_heartbeat();
    if (!stream_->Write(beat)) return false;
    return WaitFor([&] { return Acks() > acks_before; });
  }
  // Waits until the stream ends, and returns how the coordinator ended it.
  grpc::Status Finish() {
    reader_.join();
    return stream_->Finish();
  }
  void Close() {
    if (!reader_.joinable()) return;
    context_->TryCancel();
    reader_.join();
    stream_->Finish();
  }
  std::vector<v1::CoordinatorMessage> Received() {
    std::lock_guard<std::mutex> lock(mutex_);
    return received_;
  }
  bool WaitFor(const std::function<bool()>& condition) {
    const auto give_up = std::chrono::steady_clock::now() + seconds(20);
    while (!condition()) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return true;
  }

 private:
  size_t Acks() {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t acks = 0;
    for (const auto& message : received_) acks += message.has_heartbeat_ack() ? 1 : 0;
    return acks;
  }

  std::unique_ptr<v1::WorkerService::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> stream_;
  std::thread reader_;
  std::mutex mutex_;
  std::vector<v1::CoordinatorMessage> received_;
};

class ForgedWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    IsolateClientEnvironment(dir_.path());
    const std::string tokens_file = dir_.path() + "/tokens";
    WriteFile(tokens_file,
              HashTokenLine(dir_.path(), kAlice, "submitter", "alice") +
                  HashTokenLine(dir_.path(), kAdmin, "admin", "admin") +
                  HashTokenLine(dir_.path(), kHostA, "worker", "host-a") +
                  HashTokenLine(dir_.path(), "host-b-token-0123456789", "worker", "host-b") +
                  HashTokenLine(dir_.path(), kRogue, "worker", "rogue"));
    coordinator_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildPath("server/fsdpd"), "--listen", "127.0.0.1:0",
                                 "--metrics-listen", "", "--state-dir", dir_.path() + "/state",
                                 "--tokens-file", tokens_file, "--heartbeat-timeout", "5s"},
        dir_.path() + "/fsdpd.log");
    // The kernel picks the port; fsdpd logs the one it bound.
    address_ = coordinator_->WaitForAddress("fsdpd listening on ", seconds(30));
    ASSERT_FALSE(address_.empty()) << ReadFile(dir_.path() + "/fsdpd.log");
    channel_ = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  }

  // A real worker with its own credential.
  ChildProcess& StartWorker(const std::string& host) {
    const std::string token_file = dir_.path() + "/" + host + ".token";
    WriteFile(token_file, host + "-token-0123456789\n");
    workers_.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{BuildPath("worker/fsdpd-worker"), "--coordinator", address_,
                                 "--device", "cpu", "--checkpoint-root",
                                 dir_.path() + "/checkpoints", "--hostname", host,
                                 "--heartbeat-interval", "500ms", "--token-file", token_file},
        dir_.path() + "/" + host + ".log"));
    return *workers_.back();
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
  std::string Submit(const std::string& name, const std::string& yaml) {
    const std::string path = dir_.path() + "/" + name + ".yaml";
    WriteFile(path, yaml);
    CommandResult result = Ctl(kAlice, {"--json", "submit", path});
    EXPECT_EQ(result.exit_code, 0) << result.err;
    nlohmann::json out = nlohmann::json::parse(result.out, nullptr, false);
    return out.is_object() ? out.value("id", "") : "";
  }
  nlohmann::json WaitUntil(const std::string& job_id,
                           const std::function<bool(const nlohmann::json&)>& done) {
    nlohmann::json status;
    for (int i = 0; i < 600; ++i) {
      status = Status(job_id);
      if (done(status)) return status;
      std::this_thread::sleep_for(milliseconds(100));
    }
    ADD_FAILURE() << job_id << " never got there: " << status.dump() << "\n"
                  << ReadFile(dir_.path() + "/fsdpd.log");
    return status;
  }
  nlohmann::json WaitFor(const std::string& job_id, const std::string& state) {
    return WaitUntil(job_id,
                     [&](const nlohmann::json& s) { return s.value("state", "") == state; });
  }
  // The id of the one worker listed on `host`, once it is.
  std::string WorkerIdOn(const std::string& host) {
    for (int i = 0; i < 300; ++i) {
      CommandResult listed = Ctl(kAdmin, {"--json", "workers"});
      nlohmann::json workers = nlohmann::json::parse(listed.out, nullptr, false);
      if (workers.is_object()) {
        for (const auto& worker : workers.value("workers", nlohmann::json::array())) {
          if (worker.value("hostname", "") == host) return worker.value("id", "");
        }
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
    ADD_FAILURE() << "no worker on " << host;
    return "";
  }

  // Registers as a worker on host "evil" that says it runs (job, attempt, rank).
  std::string RegisterClaiming(const std::string& job_id, int attempt, int rank) {
    auto stub = v1::WorkerService::NewStub(channel_);
    v1::RegisterRequest request;
    request.set_hostname("evil");
    request.set_device_kind("cpu");
    request.set_gpu_index(-1);
    request.set_memory_bytes(1);
    request.set_running_job_id(job_id);
    request.set_running_attempt(attempt);
    request.set_running_rank(rank);
    v1::RegisterResponse response;
    grpc::Status status = stub->Register(Context(kRogue).get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.worker_id();
  }
  grpc::Status RendezvousGet(const std::string& token, const std::string& job_id,
                             const std::string& key, std::string* value = nullptr) {
    auto stub = v1::RendezvousService::NewStub(channel_);
    v1::GetRequest request;
    request.mutable_scope()->set_job_id(job_id);
    request.mutable_scope()->set_attempt(1);
    request.set_key(key);
    request.set_timeout_millis(100);
    v1::GetResponse response;
    grpc::Status status = stub->Get(Context(token).get(), request, &response);
    if (value != nullptr) *value = response.value();
    return status;
  }
  // Reads `key`'s part `part` of `parts` and `key` again whole, in one call.
  grpc::Status RendezvousGetMany(const std::string& token, const std::string& job_id,
                                 const std::string& key, int part, int parts,
                                 std::vector<std::string>* values = nullptr) {
    auto stub = v1::RendezvousService::NewStub(channel_);
    v1::GetManyRequest request;
    request.mutable_scope()->set_job_id(job_id);
    request.mutable_scope()->set_attempt(1);
    v1::KeyPart* sliced = request.add_keys();
    sliced->set_key(key);
    sliced->set_part(part);
    sliced->set_parts(parts);
    request.add_keys()->set_key(key);
    request.set_timeout_millis(100);
    v1::GetManyResponse response;
    grpc::Status status = stub->GetMany(Context(token).get(), request, &response);
    if (values != nullptr) values->assign(response.values().begin(), response.values().end());
    return status;
  }
  grpc::Status RendezvousSet(const std::string& token, const std::string& job_id,
                             const std::string& key, const std::string& value) {
    auto stub = v1::RendezvousService::NewStub(channel_);
    v1::SetRequest request;
    request.mutable_scope()->set_job_id(job_id);
    request.mutable_scope()->set_attempt(1);
    request.set_key(key);
    request.set_value(value);
    v1::SetResponse response;
    return stub->Set(Context(token).get(), request, &response);
  }
  std::vector<v1::LogLine> JobLogs(const std::string& job_id) {
    auto stub = v1::JobService::NewStub(channel_);
    v1::GetJobLogsRequest request;
    request.set_id(job_id);
    auto context = Context(kAdmin);
    auto stream = stub->GetJobLogs(context.get(), request);
    std::vector<v1::LogLine> lines;
    v1::LogLine line;
    while (stream->Read(&line)) lines.push_back(line);
    grpc::Status status = stream->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    return lines;
  }
  std::string CoordinatorLog() { return ReadFile(dir_.path() + "/fsdpd.log"); }

  TempDir dir_;
  std::string address_;
  std::unique_ptr<ChildProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::shared_ptr<grpc::Channel> channel_;
};

v1::WorkerMessage ForgedLine(const std::string& job_id, int rank, int64_t sequence) {
  v1::WorkerMessage message;
  v1::LogLine* line = message.mutable_log();
  line->set_job_id(job_id);
  line->set_attempt(1);
  line->set_rank(rank);
  line->set_sequence(sequence);
  line->set_level("info");
  line->set_text("forged line " + std::to_string(sequence));
  return message;
}

v1::WorkerMessage ForgedStep(const std::string& job_id, int rank) {
  v1::WorkerMessage message;
  v1::StepReport* report = message.mutable_step();
  report->set_job_id(job_id);
  report->set_attempt(1);
  report->set_rank(rank);
  report->set_step(1'000'000);
  report->set_loss(1234.5);
  return message;
}

// A claim on a rank of another worker's running job opens nothing: the attempt's rendezvous
// keys can be neither read nor overwritten, the claimant is told to cancel that work, and the
// coordinator logs who claimed it.
TEST_F(ForgedWorkerTest, AForgedClaimGetsNoRendezvousStandingAndIsCancelled) {
  StartWorker("host-a");
  StartWorker("host-b");
  const std::string job = Submit("long", TinySpec("long", 1'000'000));
  ASSERT_FALSE(job.empty());
  nlohmann::json running = WaitFor(job, "RUNNING");
  // The ranks connected over Gloo through the scope: rank 0's address is there to steal, read
  // whole or as rank 1's record of the list (one record: a world of two).
  std::string address;
  ASSERT_TRUE(RendezvousGet(kHostA, job, "gloo/mesh/0", &address).ok());
  ASSERT_FALSE(address.empty());
  std::vector<std::string> records;
  ASSERT_TRUE(RendezvousGetMany(kHostA, job, "gloo/mesh/0", 0, 1, &records).ok());
  EXPECT_EQ(records, (std::vector<std::string>{address, address}));

  const std::string forged = RegisterClaiming(job, 1, 0);
  ASSERT_FALSE(forged.empty());
  grpc::Status read = RendezvousGet(kRogue, job, "gloo/mesh/0");
  EXPECT_EQ(read.error_code(), grpc::StatusCode::PERMISSION_DENIED) << read.error_message();
  grpc::Status read_many = RendezvousGetMany(kRogue, job, "gloo/mesh/0", 0, 1);
  EXPECT_EQ(read_many.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << read_many.error_message();
  grpc::Status overwrite = RendezvousSet(kRogue, job, "gloo/mesh/1", "forged address");
  EXPECT_EQ(overwrite.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << overwrite.error_message();

  // Its session is told to cancel the work it claimed, and its step reports count for nothing.
  RawSession session(channel_, kRogue, forged);
  ASSERT_TRUE(session.Write(ForgedStep(job, 0)));
  ASSERT_TRUE(session.Sync());
  std::string reason;
  for (const v1::CoordinatorMessage& message : session.Received()) {
    if (message.has_cancellation() && message.cancellation().job_id() == job) {
      reason = message.cancellation().reason();
    }
  }
  EXPECT_THAT(reason, HasSubstr("did not assign " + job + " attempt 1 rank 0"));
  EXPECT_THAT(CoordinatorLog(), HasSubstr("(credential \"token:rogue\") claims " + job));
  session.Close();

  // The real job never noticed: it trains on, and rank 0's key is what rank 0 set.
  const int64_t step_before = Status(job).value("step", 0);
  nlohmann::json status =
      WaitUntil(job, [&](const nlohmann::json& s) { return s.value("step", 0) > step_before; });
  EXPECT_EQ(status.value("state", ""), "RUNNING") << status.dump();
  EXPECT_LT(status.value("step", 0), 1'000'000);
  std::string after;
  ASSERT_TRUE(RendezvousGet(kHostA, job, "gloo/mesh/1", &after).ok());
  EXPECT_NE(after, "forged address");
  ASSERT_EQ(Ctl(kAdmin, {"cancel", job}).exit_code, 0);
  WaitFor(job, "CANCELLED");
}

// Log lines sent under a forged claim are never stored, so they cannot take the sequence numbers
// of the real ranks' lines either: every real line is there, and no forged one.
TEST_F(ForgedWorkerTest, ForgedLogLinesAreNotStoredAndTheRealOnesAreIntact) {
  const std::string job = Submit("victim", TinySpec("victim", 30));
  ASSERT_FALSE(job.empty());
  // Before any real worker exists, the forger claims rank 0 of the attempt to come and sends
  // lines numbered as both ranks' will be.
  const std::string forged = RegisterClaiming(job, 1, 0);
  ASSERT_FALSE(forged.empty());
  {
    RawSession session(channel_, kRogue, forged);
    for (int64_t sequence = 1; sequence <= 200; ++sequence) {
      for (int rank = 0; rank < 2; ++rank)
        ASSERT_TRUE(session.Write(ForgedLine(job, rank, sequence)));
    }
    ASSERT_TRUE(session.Sync());
  }

  StartWorker("host-a");
  StartWorker("host-b");
  nlohmann::json done = WaitFor(job, "SUCCEEDED");
  EXPECT_EQ(done.value("step", 0), 30);
  const std::vector<v1::LogLine> lines = JobLogs(job);
  int forged_lines = 0;
  std::vector<std::vector<std::string>> by_rank(2);
  for (const v1::LogLine& line : lines) {
    if (line.text().find("forged") != std::string::npos) ++forged_lines;
    if (line.rank() >= 0 && line.rank() < 2) by_rank[line.rank()].push_back(line.text());
  }
  EXPECT_EQ(forged_lines, 0);
  for (int rank = 0; rank < 2; ++rank) {
    // The first line each rank sends and the last step's line.
    EXPECT_THAT(by_rank[rank], ::testing::Contains(HasSubstr("training victim")))
        << "rank " << rank;
    EXPECT_THAT(by_rank[rank], ::testing::Contains(::testing::StartsWith("step 30 |")))
        << "rank " << rank;
  }
}

// A scope holds what its ranks need: a rank of the job itself cannot store a value or a number
// of keys past the bounds, and the refusal names the flag that sets them.
TEST_F(ForgedWorkerTest, TheRendezvousScopeIsBoundedByItsRanksAndTheRefusalNamesTheBound) {
  StartWorker("host-a");
  StartWorker("host-b");
  const std::string job = Submit("long", TinySpec("long", 1'000'000));
  ASSERT_FALSE(job.empty());
  WaitFor(job, "RUNNING");

  grpc::Status oversized = RendezvousSet(kHostA, job, "big", std::string(8192, 'x'));
  EXPECT_EQ(oversized.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(oversized.error_message(), HasSubstr("--rendezvous-value-bytes"));

  int accepted = 0;
  grpc::Status refused;
  for (int key = 0; key < 64 && refused.ok(); ++key) {
    refused = RendezvousSet(kHostA, job, "extra/" + std::to_string(key), "v");
    if (refused.ok()) ++accepted;
  }
  // 8 keys per rank for 2 ranks, 4 of them Gloo's own.
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("--rendezvous-keys-per-rank 8"));
  EXPECT_EQ(accepted, 12);

  const int64_t step_before = Status(job).value("step", 0);
  nlohmann::json status =
      WaitUntil(job, [&](const nlohmann::json& s) { return s.value("step", 0) > step_before; });
  EXPECT_EQ(status.value("state", ""), "RUNNING") << status.dump();
  ASSERT_EQ(Ctl(kAdmin, {"cancel", job}).exit_code, 0);
  WaitFor(job, "CANCELLED");
}

// A second Session with a live worker's own id and credential is refused as Register refuses
// it, and the live worker keeps its session.
TEST_F(ForgedWorkerTest, ASessionWithALiveWorkersCredentialGetsAlreadyExists) {
  ChildProcess& worker = StartWorker("host-a");
  const std::string victim = WorkerIdOn("host-a");
  ASSERT_FALSE(victim.empty());
  ASSERT_TRUE(coordinator_->WaitForLog("worker " + victim + " opened its session", seconds(30)));

  RawSession takeover(channel_, kHostA, victim, seconds(10));
  grpc::Status ended = takeover.Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::ALREADY_EXISTS) << ended.error_message();
  EXPECT_THAT(ended.error_message(), HasSubstr("live session"));

  // The real worker's session carried on: it runs a job to the end and never lost it.
  const std::string job = Submit("after", TinySpec("after", 10, 1));
  ASSERT_FALSE(job.empty());
  nlohmann::json done = WaitFor(job, "SUCCEEDED");
  ASSERT_EQ(done["worker_ids"].size(), 1u);
  EXPECT_EQ(done["worker_ids"][0], victim);
  EXPECT_THAT(ReadFile(worker.log_path()), ::testing::Not(HasSubstr("lost the session")));
}

}  // namespace
}  // namespace fsdpd::testing
