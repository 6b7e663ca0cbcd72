// fsdpd_control_plane_gang: how long a large gang takes to start. It starts one real fsdpd on
// loopback, connects --workers simulated workers (bench/control_plane_fleet.h), submits one job
// of --ranks ranks and times, from the SubmitJob call:
//  - placed: every rank's worker holds its assignment (gang scheduling);
//  - rendezvous: every rank has exchanged addresses with every other through the coordinator's
//    RendezvousService, each rank on its own thread, through the worker's own rendezvous client
//    and mesh exchange (worker/comm/coordinator_key_value_store.h, mesh_exchange.h), as fsdpd's
//    Gloo ranks make it: two sets (its host name, its list of addresses, one per peer, of the
//    size of Gloo's TCP address) and one GetMany of its own record in every peer's list;
//  - first step: the job's first step aggregated over every rank (GetJob step 1, RUNNING). The
//    simulated workers report a step every 100 ms once stepping starts, so this adds up to
//    100 ms.
// Then it stops the coordinator and repeats, --repeat times, and prints each run and the median.
//
//   fsdpd_control_plane_gang --ranks 256 --repeat 5
//   fsdpd_control_plane_gang --ranks 256 --workers 10000 --workers-per-connection 100
//
// Exit status: 0 when every run completed, 1 on an error.
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/control_plane_fleet.h"
#include "bench/control_plane_probe.h"
#include "fsdpd/v1/jobs.grpc.pb.h"
#include "worker/comm/coordinator_key_value_store.h"
#include "worker/comm/mesh_exchange.h"

namespace fsdpd::bench {
namespace {

struct Options {
  std::string fsdpd_binary = FSDPD_DEFAULT_BINARY;
  int ranks = 256;
  int workers = 0;  // 0: as many as ranks
  int workers_per_connection = 16;
  int rendezvous_connections = 16;
  int repeat = 5;
};

struct GangTimes {
  double placed = 0;
  double rendezvous = 0;
  double first_step = 0;
  double coordinator_cpu = 0;  // fsdpd's CPU seconds from SubmitJob to the first step
  double bench_cpu = 0;        // this process's (the simulated ranks' clients)
};

double OwnCpuSeconds() { return static_cast<double>(clock()) / CLOCKS_PER_SEC; }

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The size of a Gloo TCP pair's address: a sockaddr_storage and a sequence number.
constexpr size_t kGlooAddressBytes = 136;

// One rank's share of a full-mesh rendezvous, through the exchange fsdpd's Gloo ranks use.
absl::Status ConnectFullMesh(KeyValueStore& store, int rank, int ranks) {
  MeshExchange exchange;
  exchange.prefix = "gloo/";
  exchange.rank = rank;
  exchange.size = ranks;
  exchange.host = absl::StrCat("host-", rank / 8);
  exchange.timeout = std::chrono::seconds(60);
  for (int peer = 0; peer < ranks; ++peer) {
    exchange.addresses.push_back(std::string(kGlooAddressBytes, static_cast<char>(peer)));
  }
  absl::StatusOr<MeshPeers> peers = ExchangeMeshAddresses(store, exchange);
  if (!peers.ok()) return peers.status();
  // Each peer's record for this rank is the one that peer filled with this rank's number.
  for (int peer = 0; peer < ranks; ++peer) {
    if (peer == rank) continue;
    if (peers->peer_addresses[peer] != std::string(kGlooAddressBytes, static_cast<char>(rank))) {
      return absl::InternalError(
          absl::StrCat("rank ", rank, " read the wrong record of rank ", peer, "'s list"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<GangTimes> RunOnce(const Options& options) {
  const int workers = options.workers > 0 ? options.workers : options.ranks;
  char pattern[] = "/tmp/fsdpd-gang-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return absl::InternalError("mkdtemp failed");
  const std::string state_dir = pattern;
  CoordinatorProcess coordinator;
  if (absl::Status status =
          coordinator.Start(options.fsdpd_binary, state_dir, RegistrationBoundsFor(workers));
      !status.ok()) {
    return status;
  }
  const std::string target = absl::StrCat("127.0.0.1:", coordinator.grpc_port());
  Fleet fleet({target, workers, options.workers_per_connection, 8, 2, 10});
  if (absl::Status status = fleet.Start(); !status.ok()) return status;
  auto jobs =
      v1::JobService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));

  GangTimes times;
  absl::StatusOr<ProcessSample> before = SampleProcess(coordinator.pid());
  if (!before.ok()) return before.status();
  const double own_before = OwnCpuSeconds();
  const Clock::time_point submitted = Clock::now();
  v1::SubmitJobRequest request;
  *request.mutable_spec() = TinyJobSpec(options.ranks, "gang");
  v1::SubmitJobResponse response;
  grpc::ClientContext submit_context;
  if (grpc::Status status = jobs->SubmitJob(&submit_context, request, &response); !status.ok()) {
    return absl::InternalError("SubmitJob: " + status.error_message());
  }
  while (fleet.AssignedCount() < options.ranks) {
    if (SecondsSince(submitted) > 120) {
      return absl::DeadlineExceededError(absl::StrCat("only ", fleet.AssignedCount(), " of ",
                                                      options.ranks, " ranks placed within 120 s"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  times.placed = SecondsSince(submitted);

  // Every rank through the worker's own rendezvous client, on a few shared connections.
  std::vector<WorkerTally> ranks;
  for (WorkerTally& tally : fleet.Tallies()) {
    if (tally.job_id == response.id()) ranks.push_back(std::move(tally));
  }
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int index = 0; index < options.rendezvous_connections; ++index) {
    grpc::ChannelArguments arguments;
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channels.push_back(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), arguments));
  }
  absl::Mutex failure_mutex;
  absl::Status failure;
  std::vector<std::thread> threads;
  for (size_t index = 0; index < ranks.size(); ++index) {
    threads.emplace_back([&, index] {
      const WorkerTally& rank = ranks[index];
      CoordinatorKeyValueStore store(channels[index % channels.size()], rank.job_id, rank.attempt);
      absl::Status status = ConnectFullMesh(store, rank.rank, options.ranks);
      if (!status.ok()) {
        absl::MutexLock lock(&failure_mutex);
        failure.Update(status);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  if (!failure.ok()) return failure;
  times.rendezvous = SecondsSince(submitted);

  fleet.SetStepping(true);
  while (true) {
    grpc::ClientContext context;
    v1::GetJobRequest get;
    get.set_id(response.id());
    v1::Job job;
    if (jobs->GetJob(&context, get, &job).ok() && job.step() >= 1 && job.state() == v1::RUNNING) {
      break;
    }
    if (SecondsSince(submitted) > 240) {
      return absl::DeadlineExceededError("the job's first step was not aggregated within 240 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  times.first_step = SecondsSince(submitted);
  absl::StatusOr<ProcessSample> after = SampleProcess(coordinator.pid());
  if (!after.ok()) return after.status();
  times.coordinator_cpu = after->cpu_seconds - before->cpu_seconds;
  times.bench_cpu = OwnCpuSeconds() - own_before;
  fleet.StopTicking();
  if (absl::Status status = coordinator.Stop(std::chrono::seconds(60)); !status.ok()) {
    return status;
  }
  std::error_code error;
  std::filesystem::remove_all(state_dir, error);
  return times;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

}  // namespace
}  // namespace fsdpd::bench

int main(int argc, char** argv) {
  // As in fsdpd: no lock-order graph on gRPC's mutexes (Debian's Abseil keeps one by default).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  fsdpd::bench::Options options;
  CLI::App app{"fsdpd_control_plane_gang: gang scheduling and rendezvous of one large job"};
  app.add_option("--fsdpd", options.fsdpd_binary, "the coordinator binary to start");
  app.add_option("--ranks", options.ranks, "ranks of the job")->check(CLI::Range(1, 1024));
  app.add_option("--workers", options.workers, "simulated workers (0: as many as ranks)")
      ->check(CLI::Range(0, 20000));
  app.add_option("--workers-per-connection", options.workers_per_connection,
                 "simulated workers sharing one TCP connection")
      ->check(CLI::Range(1, 1000));
  app.add_option("--rendezvous-connections", options.rendezvous_connections,
                 "TCP connections the ranks' rendezvous calls share")
      ->check(CLI::Range(1, 1024));
  app.add_option("--repeat", options.repeat, "runs, each on a fresh coordinator")
      ->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  if (options.workers != 0 && options.workers < options.ranks) {
    std::fprintf(stderr, "--workers (%d) must be 0 or at least --ranks (%d)\n", options.workers,
                 options.ranks);
    return 1;
  }
  std::vector<double> placed, rendezvous, first_step;
  for (int run = 1; run <= options.repeat; ++run) {
    absl::StatusOr<fsdpd::bench::GangTimes> times = fsdpd::bench::RunOnce(options);
    if (!times.ok()) {
      std::fprintf(stderr, "run %d: %s\n", run, times.status().ToString().c_str());
      return 1;
    }
    std::printf(
        "run %d: %d ranks placed %.3f s, rendezvous done %.3f s, first step %.3f s "
        "after SubmitJob; CPU meanwhile: fsdpd %.2f s, the ranks' clients %.2f s\n",
        run, options.ranks, times->placed, times->rendezvous, times->first_step,
        times->coordinator_cpu, times->bench_cpu);
    placed.push_back(times->placed);
    rendezvous.push_back(times->rendezvous);
    first_step.push_back(times->first_step);
  }
  std::printf("median of %d: placed %.3f s, rendezvous done %.3f s, first step %.3f s\n",
              options.repeat, fsdpd::bench::Median(placed), fsdpd::bench::Median(rendezvous),
              fsdpd::bench::Median(first_step));
  return 0;
}
