// fsdpd_control_plane_load: starts one real fsdpd on loopback with a fresh state directory,
// connects N simulated workers (Register + one Session stream each), submits N / world_size
// tiny CPU jobs so the scheduler gives every worker a rank, and then has every worker stream
// 10 StepReports/s (--reports-per-second) for the measurement window. Meanwhile a client issues
// SubmitJob, GetJob and ListJobs at a steady rate and /metrics is scraped once a second. At the end
// it checks that no attempt was failed (no worker reassigned or cancelled), that the coordinator
// aggregated (GetJob step, within --catch-up-seconds of the window's end) and stored (SQLite
// rows, after a SIGTERM flush) every report that was sent, and prints the coordinator's memory
// and CPU. It starts fsdpd with the registration bounds its fleet needs (--max-workers,
// --register-rate), and passes --fsdpd-arg on.
//
//   fsdpd_control_plane_load --workers 1000 --world-size 4 --seconds 30
//
// Exit status: 0 when the targets --require names were met, 3 when not, 1 on an error.
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/control_plane_fleet.h"
#include "bench/control_plane_probe.h"
#include "fsdpd/v1/jobs.grpc.pb.h"
#include "proto/spec/job_spec.h"

namespace fsdpd::bench {
namespace {

struct Options {
  std::string fsdpd_binary = FSDPD_DEFAULT_BINARY;
  int workers = 1000;
  int world_size = 4;
  int seconds = 30;
  int workers_per_connection = 1;
  int tick_threads = 2;
  double probe_rate = 20;  // SubmitJob, GetJob and ListJobs calls per second, in turn
  int reports_per_second = 10;
  int catch_up_seconds = 30;
  double read_p99_millis = 50;
  // Which targets decide the exit status: "all", or "no-drop" (nothing lost and no attempt
  // failed), or "no-drop,reads" (and SubmitJob/GetJob/ListJobs p99 under --read-p99-ms), or
  // "no-drop,reads,paced" (and the coordinator paced every worker: the load overloaded it, and
  // its backpressure reached the fleet).
  std::string require = "all";
  std::vector<std::string> fsdpd_args;
  std::string keep_state_dir;
};

std::string LoadAverage() {
  std::ifstream file("/proc/loadavg");
  std::string one, five;
  file >> one >> five;
  return one + " " + five;
}

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Latencies of the probe's calls, in milliseconds.
struct ProbeMillis {
  std::vector<double> submit, get, list;
};

// SubmitJob, GetJob and ListJobs in turn at `rate` calls/s, on a connection of their own.
// ListJobs asks for the newest 100 jobs, as a dashboard's first page would; the coordinator
// still reads every job to order them.
void ProbeLoop(const std::string& target, double rate, int world_size,
               const std::vector<std::string>& job_ids, const std::atomic<bool>& stop,
               ProbeMillis& millis, int64_t& failures) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto stub = v1::JobService::NewStub(
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), arguments));
  std::mt19937 random(7);
  const auto period = std::chrono::duration<double>(1.0 / rate);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t call = 0; !stop; ++call) {
    std::this_thread::sleep_until(
        start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(call * period));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const auto begin = std::chrono::steady_clock::now();
    grpc::Status status;
    if (call % 3 == 0) {
      v1::SubmitJobRequest request;
      // Bigger than the idle pool, so it waits PENDING and takes no simulated worker.
      *request.mutable_spec() = TinyJobSpec(world_size, absl::StrCat("probe-", call));
      v1::SubmitJobResponse response;
      status = stub->SubmitJob(&context, request, &response);
      if (status.ok()) millis.submit.push_back(MillisSince(begin));
    } else if (call % 3 == 1) {
      v1::GetJobRequest request;
      request.set_id(job_ids[random() % job_ids.size()]);
      v1::Job response;
      status = stub->GetJob(&context, request, &response);
      if (status.ok()) millis.get.push_back(MillisSince(begin));
    } else {
      v1::ListJobsRequest request;
      request.set_page_size(100);
      v1::ListJobsResponse response;
      status = stub->ListJobs(&context, request, &response);
      if (status.ok()) millis.list.push_back(MillisSince(begin));
    }
    if (!status.ok()) {
      ++failures;
      std::fprintf(stderr, "probe call failed: %s\n", status.error_message().c_str());
    }
  }
}

void ScrapeLoop(int port, const std::atomic<bool>& stop, std::vector<double>& millis,
                size_t& largest_body, int64_t& failures) {
  while (!stop) {
    const auto begin = std::chrono::steady_clock::now();
    absl::StatusOr<size_t> body = ScrapeMetrics(port);
    if (body.ok()) {
      millis.push_back(MillisSince(begin));
      largest_body = std::max(largest_body, *body);
    } else {
      ++failures;
      std::fprintf(stderr, "scrape failed: %s\n", body.status().ToString().c_str());
    }
    std::this_thread::sleep_until(begin + std::chrono::seconds(1));
  }
}

struct LogCounts {
  int64_t lost = 0;       // "worker ... lost: no message (heartbeat) for ..."
  int64_t suspended = 0;  // "lost-worker decisions suspended: ..."
};
LogCounts CountLogLines(const std::string& path) {
  LogCounts counts;
  std::ifstream log(path);
  for (std::string line; std::getline(log, line);) {
    if (line.find(" lost: no ") != std::string::npos) ++counts.lost;
    if (line.find("lost-worker decisions suspended") != std::string::npos) ++counts.suspended;
  }
  return counts;
}

void PrintLatency(const char* name, const LatencySummary& summary) {
  std::printf("%-22s n=%zu p50=%.2f ms p99=%.2f ms max=%.2f ms\n", name, summary.count, summary.p50,
              summary.p99, summary.max);
}

absl::Status Run(const Options& options, bool& targets_met) {
  if (options.workers % options.world_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--workers (", options.workers,
                                                   ") must be a multiple of --world-size (",
                                                   options.world_size, ")"));
  }
  if (std::vector<FieldError> errors = ValidateJobSpec(TinyJobSpec(options.world_size, "load"));
      !errors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the load job spec: ", FormatFieldErrors(errors)));
  }
  std::string state_dir = options.keep_state_dir;
  if (state_dir.empty()) {
    char pattern[] = "/tmp/fsdpd-load-XXXXXX";
    if (mkdtemp(pattern) == nullptr) return absl::InternalError("mkdtemp failed");
    state_dir = pattern;
  }
  CoordinatorProcess coordinator;
  // Flags given with --fsdpd-arg come after the fleet's registration bounds and win.
  std::vector<std::string> fsdpd_args = RegistrationBoundsFor(options.workers);
  fsdpd_args.insert(fsdpd_args.end(), options.fsdpd_args.begin(), options.fsdpd_args.end());
  if (absl::Status status = coordinator.Start(options.fsdpd_binary, state_dir, fsdpd_args);
      !status.ok()) {
    return status;
  }
  const std::string target = absl::StrCat("127.0.0.1:", coordinator.grpc_port());
  std::printf("fsdpd pid %d on %s, metrics on %d, state in %s\n", coordinator.pid(), target.c_str(),
              coordinator.metrics_port(), state_dir.c_str());
  absl::StatusOr<ProcessSample> idle = SampleProcess(coordinator.pid());
  if (!idle.ok()) return idle.status();

  // Workers first, then jobs: each submission places one gang at once.
  const auto setup_start = std::chrono::steady_clock::now();
  Fleet fleet({target, options.workers, options.workers_per_connection, 8, options.tick_threads,
               options.reports_per_second});
  if (absl::Status status = fleet.Start(); !status.ok()) return status;
  const double register_seconds = MillisSince(setup_start) / 1000;
  auto job_stub =
      v1::JobService::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  std::vector<std::string> job_ids;
  for (int job = 0; job < options.workers / options.world_size; ++job) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = TinyJobSpec(options.world_size, absl::StrCat("load-", job));
    v1::SubmitJobResponse response;
    grpc::ClientContext context;
    const grpc::Status status = job_stub->SubmitJob(&context, request, &response);
    if (!status.ok()) return absl::InternalError("SubmitJob: " + status.error_message());
    job_ids.push_back(response.id());
  }
  // Setup is not what the bench measures: a host short of CPU may take a while to place every
  // gang.
  if (!fleet.WaitForAssignments(options.workers, std::chrono::seconds(120))) {
    return absl::DeadlineExceededError(absl::StrCat("only ", fleet.AssignedCount(), " of ",
                                                    options.workers,
                                                    " workers got an assignment within 120 s"));
  }
  std::printf("setup: %d workers registered and streaming in %.1f s, %zu jobs placed in %.1f s\n",
              options.workers, register_seconds, job_ids.size(), MillisSince(setup_start) / 1000);
  absl::StatusOr<ProcessSample> loaded = SampleProcess(coordinator.pid());
  if (!loaded.ok()) return loaded.status();

  // The measurement window.
  std::atomic<bool> stop_probes{false};
  ProbeMillis probe_millis;
  std::vector<double> scrape_millis;
  int64_t probe_failures = 0, scrape_failures = 0;
  size_t metrics_bytes = 0;
  const int64_t own_cpu_start = static_cast<int64_t>(clock());
  const std::string load_before = LoadAverage();
  fleet.SetStepping(true);
  const auto window_start = std::chrono::steady_clock::now();
  std::thread probe([&] {
    ProbeLoop(target, options.probe_rate, options.world_size, job_ids, stop_probes, probe_millis,
              probe_failures);
  });
  std::thread scrape([&] {
    ScrapeLoop(coordinator.metrics_port(), stop_probes, scrape_millis, metrics_bytes,
               scrape_failures);
  });
  std::this_thread::sleep_until(window_start + std::chrono::seconds(options.seconds));
  fleet.SetStepping(false);
  const double window_seconds = MillisSince(window_start) / 1000;
  absl::StatusOr<ProcessSample> end = SampleProcess(coordinator.pid());
  if (!end.ok()) return end.status();
  const double own_cpu = static_cast<double>(clock() - own_cpu_start) / CLOCKS_PER_SEC;
  const std::string load_after = LoadAverage();
  stop_probes = true;
  probe.join();
  scrape.join();
  // The workers keep beating (as live ones do) while the coordinator catches up: every report
  // sent is confirmed stored (ReportsStored on the heartbeat acks), then the streams drain.
  const bool confirmed = fleet.WaitForConfirmations(std::chrono::seconds(options.catch_up_seconds));
  const double confirm_seconds = MillisSince(window_start) / 1000 - window_seconds;
  fleet.StopTicking();
  const bool drained = fleet.WaitForDrain(std::chrono::seconds(30));

  // What was sent: per rank, and the step every rank of a job reached.
  std::vector<WorkerTally> tallies = fleet.Tallies();
  int64_t sent = 0;
  size_t max_queue = 0;
  int64_t max_paced_millis = 0;
  int64_t paced_workers = 0;
  std::map<std::string, int64_t> complete_step;  // job -> min over ranks
  int64_t disturbed_workers = 0;
  for (const WorkerTally& tally : tallies) {
    sent += tally.steps_written;
    max_queue = std::max(max_queue, tally.max_queue);
    max_paced_millis = std::max(max_paced_millis, tally.max_paced_millis);
    if (tally.max_paced_millis > 0) ++paced_workers;
    if (tally.assignments != 1 || tally.cancelled) ++disturbed_workers;
    if (tally.job_id.empty()) continue;
    auto [entry, inserted] = complete_step.emplace(tally.job_id, tally.steps_written);
    if (!inserted) entry->second = std::min(entry->second, tally.steps_written);
  }
  // The coordinator's aggregate (GetJob step) must reach it once it has read everything.
  int aggregated_jobs = 0;
  int unmatched_jobs = 0;
  const auto verify_deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(options.catch_up_seconds);
  for (const auto& [job_id, step] : complete_step) {
    while (true) {
      grpc::ClientContext context;
      v1::GetJobRequest request;
      request.set_id(job_id);
      v1::Job job;
      const grpc::Status status = job_stub->GetJob(&context, request, &job);
      if (status.ok() && job.step() == step) {
        ++aggregated_jobs;
        break;
      }
      if (std::chrono::steady_clock::now() > verify_deadline) {
        if (++unmatched_jobs > 5) break;  // the first few show the pattern
        std::printf("job %s: GetJob step %lld, every rank sent %lld\n", job_id.c_str(),
                    static_cast<long long>(job.step()), static_cast<long long>(step));
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  const double verify_seconds = MillisSince(window_start) / 1000 - window_seconds;
  std::printf(
      "caught up after the window: every report confirmed stored %s %.1f s after it; every "
      "job's GetJob step matched by %.1f s\n",
      confirmed ? "within" : "NOT within", confirm_seconds, verify_seconds);
  if (absl::Status status = coordinator.Stop(std::chrono::seconds(60)); !status.ok()) {
    return status;
  }
  absl::StatusOr<StoredSteps> stored = ReadStoredSteps(state_dir + "/fsdpd.db");
  if (!stored.ok()) return stored.status();
  int64_t stored_rows = 0, rank_mismatches = 0, event_mismatches = 0;
  for (const auto& [rank, rows] : stored->rank_reports) stored_rows += rows;
  for (const WorkerTally& tally : tallies) {
    auto found = stored->rank_reports.find({tally.job_id, tally.attempt, tally.rank});
    const int64_t rows = found == stored->rank_reports.end() ? 0 : found->second;
    if (rows != tally.steps_written) ++rank_mismatches;
  }
  for (const auto& [job_id, step] : complete_step) {
    auto found = stored->job_events.find(job_id);
    if ((found == stored->job_events.end() ? 0 : found->second) != step) ++event_mismatches;
  }

  const double target_rate = static_cast<double>(options.reports_per_second) * options.workers;
  const double rate = static_cast<double>(sent) / window_seconds;
  const LatencySummary submit = Summarize(probe_millis.submit);
  const LatencySummary get = Summarize(probe_millis.get);
  const LatencySummary list = Summarize(probe_millis.list);
  const LatencySummary scrape_summary = Summarize(scrape_millis);
  std::printf(
      "window: %.1f s, %d workers, world_size %d, %zu jobs, %d workers/connection; host load "
      "average (1 min, 5 min) %s before, %s after, on %ld cores\n",
      window_seconds, options.workers, options.world_size, job_ids.size(),
      options.workers_per_connection, load_before.c_str(), load_after.c_str(),
      sysconf(_SC_NPROCESSORS_ONLN));
  std::printf(
      "step reports sent: %lld (%.0f/s, target %.0f/s = %.1f%%), largest send queue %zu, "
      "late tick slots %lld, drained %s\n",
      static_cast<long long>(sent), rate, target_rate, 100 * rate / target_rate, max_queue,
      static_cast<long long>(fleet.late_slots()), drained ? "yes" : "NO");
  std::printf("paced by the coordinator: %lld workers, at most every %lld ms\n",
              static_cast<long long>(paced_workers), static_cast<long long>(max_paced_millis));
  std::printf(
      "stored step_reports rows: %lld (ranks with a wrong count: %lld); jobs whose "
      "GetJob step matched: %d/%zu (%.1f s after the window); step_events mismatches: "
      "%lld\n",
      static_cast<long long>(stored_rows), static_cast<long long>(rank_mismatches), aggregated_jobs,
      complete_step.size(), verify_seconds, static_cast<long long>(event_mismatches));
  PrintLatency("SubmitJob", submit);
  PrintLatency("GetJob", get);
  PrintLatency("ListJobs (100)", list);
  PrintLatency("/metrics scrape", scrape_summary);
  std::printf("/metrics body: %zu bytes; probe failures %lld, scrape failures %lld\n",
              metrics_bytes, static_cast<long long>(probe_failures),
              static_cast<long long>(scrape_failures));
  std::printf("fsdpd RSS: %.1f MiB idle, %.1f MiB after setup, %.1f MiB at the end; threads %d\n",
              idle->rss_bytes / 1048576.0, loaded->rss_bytes / 1048576.0,
              end->rss_bytes / 1048576.0, end->threads);
  std::printf(
      "fsdpd CPU over the window: %.1f s = %.0f%% of one core (%.1f us per step report); "
      "runnable but waiting for a core: %.1f thread-s; load generator %.0f%%\n",
      end->cpu_seconds - loaded->cpu_seconds,
      100 * (end->cpu_seconds - loaded->cpu_seconds) / window_seconds,
      sent > 0 ? 1e6 * (end->cpu_seconds - loaded->cpu_seconds) / static_cast<double>(sent) : 0.0,
      end->run_queue_seconds - loaded->run_queue_seconds, 100 * own_cpu / window_seconds);
  std::printf("workers whose attempt the coordinator failed (reassigned or cancelled): %lld\n",
              static_cast<long long>(disturbed_workers));
  const LogCounts log = CountLogLines(state_dir + "/fsdpd.log");
  std::printf(
      "coordinator log: %lld workers declared lost, lost-worker decisions suspended %lld times\n",
      static_cast<long long>(log.lost), static_cast<long long>(log.suspended));
  const bool no_drop = disturbed_workers == 0 && confirmed && drained && stored_rows == sent &&
                       rank_mismatches == 0 &&
                       aggregated_jobs == static_cast<int>(complete_step.size()) &&
                       event_mismatches == 0;
  const bool rate_met = rate >= 0.99 * target_rate;
  const bool latency_met = submit.count > 0 && get.count > 0 && list.count > 0 &&
                           submit.p99 < options.read_p99_millis &&
                           get.p99 < options.read_p99_millis && list.p99 < options.read_p99_millis;
  const bool scrape_met = !scrape_millis.empty() && scrape_summary.max < 250;
  std::printf("targets: rate %s, no drop %s, p99<%.0fms %s, scrape<250ms %s\n",
              rate_met ? "MET" : "MISSED", no_drop ? "MET" : "MISSED", options.read_p99_millis,
              latency_met ? "MET" : "MISSED", scrape_met ? "MET" : "MISSED");
  std::fflush(stdout);
  if (options.require == "no-drop") {
    targets_met = no_drop;
  } else if (options.require == "no-drop,reads") {
    targets_met = no_drop && latency_met;
  } else if (options.require == "no-drop,reads,paced") {
    targets_met = no_drop && latency_met && paced_workers == options.workers;
  } else {
    targets_met = rate_met && no_drop && latency_met && scrape_met;
  }
  // A temporary state folder (a 10,000-worker run leaves some 150 MiB) is kept only when the
  // targets were missed, to look into.
  if (options.keep_state_dir.empty() && targets_met) {
    std::error_code error;
    std::filesystem::remove_all(state_dir, error);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace fsdpd::bench

int main(int argc, char** argv) {
  // As in fsdpd: no lock-order graph on gRPC's mutexes (Debian's Abseil keeps one by default).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines show up while it runs
  fsdpd::bench::Options options;
  CLI::App app{"fsdpd_control_plane_load: simulated workers against one real fsdpd"};
  app.add_option("--fsdpd", options.fsdpd_binary, "the coordinator binary to start");
  app.add_option("--workers", options.workers, "simulated workers")->check(CLI::Range(1, 20000));
  app.add_option("--world-size", options.world_size, "ranks per job")->check(CLI::Range(1, 1024));
  app.add_option("--seconds", options.seconds, "measurement window")->check(CLI::Range(1, 3600));
  app.add_option("--workers-per-connection", options.workers_per_connection,
                 "Session streams sharing one TCP connection")
      ->check(CLI::Range(1, 20000));
  app.add_option("--tick-threads", options.tick_threads, "threads that pace the sends")
      ->check(CLI::Range(1, 64));
  app.add_option("--probe-rate", options.probe_rate,
                 "SubmitJob, GetJob and ListJobs calls per second")
      ->check(CLI::Range(0.1, 1000.0));
  app.add_option("--reports-per-second", options.reports_per_second,
                 "step reports per worker per second while stepping")
      ->check(CLI::IsMember({1, 2, 5, 10}));
  app.add_option("--catch-up-seconds", options.catch_up_seconds,
                 "how long after the window every job's GetJob step may take to match")
      ->check(CLI::Range(1, 3600));
  app.add_option("--read-p99-ms", options.read_p99_millis,
                 "the SubmitJob, GetJob and ListJobs p99 target")
      ->check(CLI::Range(1.0, 100000.0));
  app.add_option("--require", options.require, "targets that decide the exit status")
      ->check(CLI::IsMember({"all", "no-drop", "no-drop,reads", "no-drop,reads,paced"}));
  app.add_option("--fsdpd-arg", options.fsdpd_args,
                 "a flag for fsdpd, after the bench's own (repeat; e.g. --fsdpd-arg=--heartbeat-"
                 "timeout=2s)")
      ->allow_extra_args(false);
  app.add_option("--state-dir", options.keep_state_dir, "use this state dir (default: a temp one)");
  CLI11_PARSE(app, argc, argv);
  bool targets_met = false;
  const absl::Status status = fsdpd::bench::Run(options, targets_met);
  if (!status.ok()) {
    std::fprintf(stderr, "fsdpd_control_plane_load: %s\n", status.ToString().c_str());
    std::fflush(stderr);
    _exit(1);
  }
  // _exit: the coordinator ended every Session already, and the gRPC library's teardown of
  // thousands of channels adds nothing to the figures.
  _exit(targets_met ? 0 : 3);
}
