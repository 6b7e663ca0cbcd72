// Every tunable of the coordinator in one place: one small Config per component, gathered in
// CoordinatorConfig, each checked at startup so a bad value fails with a clear message.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fsdpd::server {

struct JobStoreConfig {
  std::string database_path;  // <state-dir>/fsdpd.db
  // Step reports and logs are written in batches; a batch is written when it holds this many
  // rows, when flush_interval passes, and always on shutdown.
  int batch_rows = 256;
  std::chrono::milliseconds flush_interval{1000};
  // Per-rank step reports kept per job attempt (--rank-report-steps): each rank's newest this
  // many steps, so that a long job cannot grow the database without bound (a rank's report is
  // about 200 bytes a step). Older ones are deleted by the writer in the transaction that stores
  // the rank's newer ones; 0 keeps them all. The job's aggregated steps are not affected.
  int64_t rank_report_steps = 100000;
  absl::Status Check() const;
};

struct WorkerRegistryConfig {
  std::chrono::milliseconds heartbeat_timeout{10000};
  std::chrono::milliseconds heartbeat_interval{1000};  // what workers are told to use
  // How long a LOST worker stays listed (alerts watch it) before it is forgotten
  // (--lost-worker-retention).
  std::chrono::milliseconds lost_retention{3600 * 1000};
  // Registration bounds (--max-workers, --register-rate): the workers known at once, lost ones
  // included, and the Register calls one peer address may make per second (with a burst of
  // twice that), so a flood of fake workers cannot grow the registry.
  int max_workers = 4096;
  double register_rate_per_peer = 20;
  // Liveness under overload (docs/operations.md "Overload"): lost-worker decisions are
  // suspended while the coordinator lags behind reading its workers by more than a quarter of
  // the heartbeat timeout, and while more than this fraction of the fleet went silent at once
  // (WorkerRegistry::ExpiryRules).
  double mass_silence_fraction = 0.5;
  std::chrono::milliseconds MaxProcessingLag() const { return heartbeat_timeout / 4; }
  // The most memory admitted for one worker of each kind, whatever it claims
  // (--max-worker-memory; worker_registry.h). 0: no ceiling, the default.
  int64_t max_memory_cpu = 0;
  int64_t max_memory_cuda = 0;
  int64_t MemoryCeiling(const std::string& device_kind) const {
    return device_kind == "cuda" ? max_memory_cuda : device_kind == "cpu" ? max_memory_cpu : 0;
  }
  absl::Status Check() const;
};

// What one attempt's rendezvous scope may hold, sized by its ranks R (the workers the
// coordinator assigned to the attempt). What the ranks store, measured (docs/operations.md):
// per rank Gloo's "gloo/<r>" (136 bytes per peer: R-1 TCP addresses) and "gloo/rank_<r>" (the
// host name), and on CUDA "fsdpd/device/<r>" (the GPU UUID, 40 bytes); once per attempt NCCL's
// "nccl_unique_id" (its 128-byte id in hex, 256 bytes). At most 3 keys per rank, plus one.
struct RendezvousConfig {
  std::chrono::milliseconds default_get_timeout{30000};  // used when a Get asks for none
  std::chrono::milliseconds max_get_timeout{600000};
  // Keys: at most max_keys_per_rank * R (--rendezvous-keys-per-rank).
  int max_keys_per_rank = 8;
  // A value: at most max_value_bytes + value_bytes_per_rank * R bytes (--rendezvous-value-bytes
  // sets the first): Gloo's address list grows by 136 bytes per rank.
  int64_t max_value_bytes = 4096;
  int64_t value_bytes_per_rank = 256;
  // All keys and values together: at most R values of the largest size.
  absl::Status Check() const;
};

struct JobManagerConfig {
  int max_world_size = 1024;
  // The SCHEDULED deadline: every rank must accept its assignment within this, or the attempt
  // fails and is retried. 0: the heartbeat timeout plus the rendezvous Get timeout.
  std::chrono::milliseconds start_timeout{0};
  std::string artifact_dir;  // <state-dir>/artifacts
  // The text one job's stored log lines may hold (--max-log-bytes-per-job). Past it one marker
  // line says so and later lines are dropped (still confirmed to the worker, which forgets them).
  int64_t max_log_bytes_per_job = int64_t{256} << 20;
  static constexpr int64_t kMinLogBytesPerJob = 64 << 10;  // four lines of the longest kind
  // What a watch replays before it follows the job live (--watch-replay-steps): every state
  // change and the newest this many aggregated steps. A watch reads its history under the job
  // manager's lock, so an unbounded replay of a long job would stall every other call while it
  // loads; 0 replays no steps.
  int64_t watch_replay_steps = 10000;
  // The highest spec priority each role that may submit can ask for (--max-priority); without
  // authentication every caller is admin. The spec itself allows -1000..1000.
  int max_priority_submitter = 100;
  int max_priority_admin = 1000;
  absl::Status Check() const;
};

struct MetricsConfig {
  std::string listen;  // empty: no HTTP endpoint (the registry still collects)
  // /metrics is served in plaintext: a non-loopback listen address needs this set
  // (--insecure-metrics), the same rule as the gRPC --listen without TLS.
  bool insecure = false;
  // How long a finished job's per-job series stay exposed before they are removed, so the
  // last figures can still be scraped; zero removes them as soon as the job ends.
  std::chrono::milliseconds retention{5 * 60 * 1000};
  absl::Status Check() const;
};

// Paths to PEM files. cert and key turn TLS on; client_ca additionally asks clients for a
// certificate signed by it, which the worker and rendezvous services require (server/auth.h).
struct TlsConfig {
  std::string cert_path;
  std::string key_path;
  std::string client_ca_path;
  bool enabled() const { return !cert_path.empty(); }
  absl::Status Check() const;
};

struct CoordinatorConfig {
  std::string listen = "127.0.0.1:7070";
  bool insecure = false;  // allows a non-loopback listen address without TLS
  TlsConfig tls;
  std::string tokens_file;  // empty: no bearer tokens asked for (server/auth.h)
  // A second, plaintext gRPC port serving only grpc.health.v1 (empty: none). Kubernetes' gRPC
  // probes cannot speak TLS; this port tells them SERVING or NOT_SERVING and nothing else.
  std::string health_listen;
  // The largest request accepted; artifacts and rendezvous values travel in 1 MiB pieces.
  int max_receive_message_bytes = 4 << 20;
  std::string state_dir;
  JobStoreConfig store;
  WorkerRegistryConfig workers;
  RendezvousConfig rendezvous;
  JobManagerConfig jobs;
  MetricsConfig metrics;

  // Derives the paths under state_dir that were left empty.
  void FillPaths();
  absl::Status Check() const;
};

// "10s", "500ms", "2m" or a bare number of seconds ("10", "0.5").
absl::StatusOr<std::chrono::milliseconds> ParseDuration(const std::string& text);

// "64GiB", "512MiB", "80GB" or a bare number of bytes: binary units KiB..PiB, decimal KB..PB.
absl::StatusOr<int64_t> ParseByteSize(const std::string& text);
// --max-worker-memory: one size for every device kind, or "cpu=SIZE,cuda=SIZE" (either may be
// left out: no ceiling for it).
absl::Status ParseMemoryCeilings(const std::string& text, WorkerRegistryConfig* config);
// --max-priority: "submitter=N,admin=N" (either may be left out: its default stays).
absl::Status ParsePriorityCaps(const std::string& text, JobManagerConfig* config);

// True when the host part of "host:port" is a loopback address or localhost.
bool IsLoopbackAddress(const std::string& address);

}  // namespace fsdpd::server
