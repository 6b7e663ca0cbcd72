#include "server/coordinator.h"

#include <malloc.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/pem_file.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/server_builder_option.h"
#include "server/cluster_identity.h"
#include "server/sqlite_job_store.h"
#include "server/state_lock.h"
#include "server/unparsable_request_interceptor.h"
#include "spdlog/spdlog.h"

namespace fsdpd::server {
namespace {

constexpr char kJobServiceName[] = "fsdpd.v1.JobService";
// Bounds of what a worker's stream may hold unread in the coordinator (Start).
constexpr int kStreamWindowBytes = 16 << 10;
constexpr int kReadChunkBytes = 64 << 10;
// How often the ticker gives freed memory back to the system.
constexpr std::chrono::seconds kTrimInterval(10);
// Health answers by service name too (Kubernetes gRPC probes and load balancers ask so); the
// job service follows the store (ReportStoreHealth), these are SERVING while the server is.
constexpr const char* kOtherServiceNames[] = {"fsdpd.v1.WorkerService",
                                              "fsdpd.v1.RendezvousService"};
// Not a gRPC service: a health name that is NOT_SERVING while the coordinator has suspended its
// lost-worker decisions under overload (ReportLiveness). The probes ask for the whole server
// (""), which stays SERVING: an overloaded coordinator must not be restarted for it.
constexpr char kLostWorkerDecisionsName[] = "fsdpd.LostWorkerDecisions";

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeCredentials(const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  absl::StatusOr<std::string> cert = ReadPemFile("--tls-cert", tls.cert_path);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPemFile("--tls-key", tls.key_path);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (!tls.client_ca_path.empty()) {
    absl::StatusOr<std::string> client_ca = ReadPemFile("--tls-client-ca", tls.client_ca_path);
    if (!client_ca.ok()) return client_ca.status();
    options.pem_root_certs = *client_ca;
    // Requested, not required: fsdpctl has no certificate. The worker and rendezvous services
    // refuse callers without one or a worker token (Authenticator::AuthenticateWorker).
    options.client_certificate_request = GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

}  // namespace

Coordinator::Coordinator(CoordinatorConfig config) : config_(std::move(config)) {
  config_.FillPaths();
}

Coordinator::~Coordinator() { Shutdown(); }

absl::Status Coordinator::Start() {
  if (absl::Status status = config_.Check(); !status.ok()) return status;
  std::error_code error;
  std::filesystem::create_directories(config_.state_dir, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("state-dir: cannot create ", config_.state_dir, ": ", error.message()));
  }
  // One coordinator per state folder, taken before anything in it is read or written.
  absl::StatusOr<std::unique_ptr<StateLock>> lock =
      StateLock::Acquire(config_.state_dir, config_.listen);
  if (!lock.ok()) return lock.status();
  state_lock_ = std::move(*lock);
  absl::StatusOr<ClusterIdentity> cluster =
      ReadClusterIdentity(config_.state_dir, config_.store.database_path);
  if (!cluster.ok()) return cluster.status();
  absl::StatusOr<std::unique_ptr<SqliteJobStore>> store = SqliteJobStore::Open(config_.store);
  if (!store.ok()) return store.status();
  store_ = std::move(*store);
  workers_ = std::make_unique<WorkerRegistry>(config_.workers);
  rendezvous_ = std::make_unique<RendezvousStore>(config_.rendezvous);
  JobManagerConfig jobs = config_.jobs;
  if (jobs.start_timeout.count() == 0) {
    jobs.start_timeout = config_.workers.heartbeat_timeout + config_.rendezvous.default_get_timeout;
  }
  jobs_ = std::make_unique<JobManager>(jobs, *store_, *workers_, *rendezvous_);
  // A submission's scheduling pass runs on the ticker's thread, at once (RunTicker).
  jobs_->SetSchedulingWaker([this] {
    {
      std::lock_guard<std::mutex> lock(ticker_mutex_);
      schedule_now_ = true;
    }
    ticker_wakeup_.notify_all();
  });
  if (absl::Status status = jobs_->Load(); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat("loading ", config_.store.database_path, ": ",
                                                    status.message()));
  }
  // The store opened and loaded: only now does anything else go into the state folder, so a
  // damaged store leaves the folder as it was.
  if (absl::Status status = WriteClusterIdentity(config_.state_dir, *cluster); !status.ok()) {
    return status;
  }
  cluster_id_ = cluster->id;
  std::filesystem::create_directories(config_.jobs.artifact_dir, error);
  if (error) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state-dir: cannot create ", config_.jobs.artifact_dir, ": ", error.message()));
  }
  absl::StatusOr<std::unique_ptr<MetricsExporter>> metrics =
      MetricsExporter::Create(config_.metrics, *jobs_, *workers_);
  if (!metrics.ok()) return metrics.status();
  metrics_ = std::move(*metrics);
  std::vector<TokenEntry> tokens;
  if (!config_.tokens_file.empty()) {
    absl::StatusOr<std::vector<TokenEntry>> loaded = LoadTokensFile(config_.tokens_file);
    if (!loaded.ok()) return loaded.status();
    tokens = std::move(*loaded);
    spdlog::info("bearer tokens required: {} loaded from {}", tokens.size(), config_.tokens_file);
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeCredentials(config_.tls);
  if (!credentials.ok()) return credentials.status();
  authenticator_ =
      std::make_unique<Authenticator>(std::move(tokens), !config_.tls.client_ca_path.empty());
  job_service_ =
      std::make_unique<JobServiceImpl>(*jobs_, *workers_, metrics_.get(), authenticator_.get());
  worker_service_ =
      std::make_unique<WorkerServiceImpl>(*jobs_, metrics_.get(), authenticator_.get());
  rendezvous_service_ = std::make_unique<RendezvousServiceImpl>(
      *rendezvous_, metrics_.get(), authenticator_.get(), workers_.get());

  grpc::EnableDefaultHealthCheckService(true);
  // Server reflection: grpcurl and other generic clients list and call the services without
  // the .proto files.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config_.listen, *credentials, &port);
  builder.RegisterService(job_service_.get());
  builder.RegisterService(worker_service_.get());
  builder.RegisterService(rendezvous_service_.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  // fsdpd_rpc_duration_seconds and fsdpd_rpc_first_message_seconds for every RPC.
  if (metrics_ != nullptr) interceptors.push_back(metrics_->RpcTimingInterceptors());
  // A request that does not parse (a string that is not UTF-8) is the caller's error.
  interceptors.push_back(UnparsableRequestInterceptors());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  // Artifacts arrive in 1 MiB chunks; specs and reports are small. A larger request is refused
  // with RESOURCE_EXHAUSTED before it is parsed.
  builder.SetMaxReceiveMessageSize(config_.max_receive_message_bytes);
  // What a worker may send before the coordinator reads it is bounded, so an overloaded
  // coordinator slows its workers instead of growing (docs/operations.md, "Overload"): each
  // stream's HTTP/2 window stays at kStreamWindowBytes (gRPC's bandwidth-delay probing would
  // grow it to megabytes on a fast link), and socket reads come in slices of at most
  // kReadChunkBytes, since one unread message keeps its whole slice alive. A message larger
  // than the window (a 1 MiB artifact chunk) still arrives: gRPC opens the window for the
  // message being read.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamWindowBytes);
  builder.AddChannelArgument(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, kReadChunkBytes);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat("listen: cannot serve on ", config_.listen,
                                               " (address in use or not local?)"));
  }
  listen_address_ = absl::StrCat(config_.listen.substr(0, config_.listen.rfind(':')), ":", port);
  if (absl::Status status = StartHealthPort(); !status.ok()) {
    server_->Shutdown();
    server_.reset();
    return status;
  }
  const std::string& metrics_listen = config_.metrics.listen;
  std::string metrics_address;
  if (metrics_ != nullptr) {
    metrics_address =
        absl::StrCat(metrics_listen.substr(0, metrics_listen.rfind(':')), ":", metrics_->port());
  }
  if (absl::Status status =
          state_lock_->RecordAddresses(listen_address_, metrics_address, config_.health_listen);
      !status.ok()) {
    spdlog::warn("{}", std::string(status.message()));  // the lock holds; its text is stale
  }
  SetServing("", true);
  SetServing(kJobServiceName, true);
  for (const char* name : kOtherServiceNames) SetServing(name, true);
  SetServing(kLostWorkerDecisionsName, true);
  job_service_serving_ = true;
  deciding_lost_workers_ = true;
  ticker_ = std::thread([this] { RunTicker(); });
  return absl::OkStatus();
}

namespace {

// Every method but grpc.health.v1's on the health port: UNIMPLEMENTED, as for a method that
// does not exist. gRPC also needs one callback service before it serves the health service.
class UnimplementedGenericService : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    class Refuse : public grpc::ServerGenericBidiReactor {
     public:
      Refuse() {
        Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                            "this port serves grpc.health.v1 only (--health-listen)"));
      }
      void OnDone() override { delete this; }
    };
    return new Refuse;
  }
};

// Leaves server reflection, which gRPC adds to every server of the process, off the health
// port: probes there come without credentials, and reflection would describe the whole API.
class WithoutReflection : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    const std::string reflection = grpc::reflection::ProtoServerReflectionPlugin().name();
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [&](const std::unique_ptr<grpc::ServerBuilderPlugin>& plugin) {
                                    return plugin->name() == reflection;
                                  }),
                   plugins->end());
  }
};

}  // namespace

absl::Status Coordinator::StartHealthPort() {
  if (config_.health_listen.empty()) return absl::OkStatus();
  health_fallback_ = std::make_unique<UnimplementedGenericService>();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config_.health_listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterCallbackGenericService(health_fallback_.get());
  builder.SetOption(std::make_unique<WithoutReflection>());
  health_server_ = builder.BuildAndStart();  // the default health service, nothing else
  if (health_server_ == nullptr || port == 0) {
    health_server_.reset();
    return absl::UnavailableError(absl::StrCat("health-listen: cannot serve on ",
                                               config_.health_listen,
                                               " (address in use or not local?)"));
  }
  spdlog::info("health checks (grpc.health.v1 only, plaintext) on port {}", port);
  return absl::OkStatus();
}

void Coordinator::SetServing(const std::string& service, bool serving) {
  for (grpc::Server* server : {server_.get(), health_server_.get()}) {
    if (server == nullptr) continue;
    if (grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService()) {
      if (service.empty()) {
        health->SetServingStatus(serving);
      } else {
        health->SetServingStatus(service, serving);
      }
    }
  }
}

void Coordinator::RunTicker() {
  using Clock = std::chrono::steady_clock;
  // Timeouts are checked several times per heartbeat timeout; flushes follow the store config.
  const auto tick = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(200),
                                                        config_.workers.heartbeat_timeout / 4);
  Clock::time_point next_flush = Clock::now() + config_.store.flush_interval;
  Clock::time_point next_trim = Clock::now() + kTrimInterval;
  std::unique_lock<std::mutex> lock(ticker_mutex_);
  Clock::time_point due = Clock::now() + tick;
  while (!stopping_) {
    ticker_wakeup_.wait_until(lock, due, [this] { return stopping_ || schedule_now_; });
    if (stopping_) break;
    if (schedule_now_ && Clock::now() < due) {
      // A submission's pass, between ticks; the tick stays due when it was.
      schedule_now_ = false;
      lock.unlock();
      jobs_->SchedulePass();
      lock.lock();
      continue;
    }
    schedule_now_ = false;
    lock.unlock();
    // A late wake-up is a stall of the whole process (no CPU for it): the job manager counts it
    // in its processing lag (processing_lag.h).
    jobs_->processing_lag().NoteStall(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - due));
    jobs_->Tick();
    ReportStoreHealth();
    ReportLiveness();
    if (Clock::now() >= next_trim) {
      // Buffers of a backlog are freed into the allocator's arenas, which keep them: give the
      // free pages back, so the resident size follows the load down.
      malloc_trim(0);
      next_trim = Clock::now() + kTrimInterval;
    }
    if (Clock::now() >= next_flush) {
      if (absl::Status status = store_->Flush(); !status.ok()) {
        spdlog::error("job store: flush failed: {}", status.ToString());
      }
      next_flush = Clock::now() + config_.store.flush_interval;
    }
    due = Clock::now() + tick;
    lock.lock();
  }
}

// The job service is NOT_SERVING while the store cannot write: it takes no submits then.
void Coordinator::ReportStoreHealth() {
  const bool writable = jobs_->GetStoreHealth().writable;
  if (writable == job_service_serving_) return;
  job_service_serving_ = writable;
  SetServing(kJobServiceName, writable);
  if (writable) {
    spdlog::info("health: {} SERVING again: the job store writes", kJobServiceName);
  } else {
    spdlog::error("health: {} NOT_SERVING: the job store cannot write ({})", kJobServiceName,
                  jobs_->GetStoreHealth().last_error);
  }
}

void Coordinator::ReportLiveness() {
  const JobManager::LivenessHealth liveness = jobs_->GetLivenessHealth();
  if (liveness.suspended != deciding_lost_workers_) return;
  deciding_lost_workers_ = !liveness.suspended;
  SetServing(kLostWorkerDecisionsName, deciding_lost_workers_);
}

void Coordinator::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(ticker_mutex_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
  }
  // A coordinator started on the same state folder now waits for this one to finish instead of
  // refusing (server/state_lock.h).
  if (state_lock_ != nullptr) state_lock_->MarkStopping();
  ticker_wakeup_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  SetServing("", false);
  // Ends every long-lived stream first, so the server's shutdown does not wait on them.
  if (jobs_ != nullptr) jobs_->Shutdown();
  if (rendezvous_ != nullptr) rendezvous_->Shutdown();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_.reset();
  }
  if (health_server_ != nullptr) {
    health_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    health_server_.reset();
  }
  if (store_ != nullptr) {
    if (absl::Status status = store_->Flush(); !status.ok()) {
      spdlog::error("job store: final flush failed: {}", status.ToString());
    }
  }
}

}  // namespace fsdpd::server
