#include <fstream>
#include <iostream>

#include "client/commands.h"
#include "client/file_download.h"
#include "client/output.h"
#include "client/profile_table.h"
#include "client/roofline_svg.h"
#include "fsdpd/v1/jobs.grpc.pb.h"

namespace fsdpd::client {
namespace {

nlohmann::json KernelToJson(const v1::ProfileReport& report, const v1::KernelStat& kernel) {
  return {{"name", kernel.name()},
          {"unit", kernel.unit()},
          {"phase", kernel.phase()},
          {"calls", kernel.calls()},
          {"total_seconds", kernel.total_seconds()},
          {"percent_of_total", kernel.percent_of_total()},
          {"sm_throughput_ratio", kernel.sm_throughput_ratio()},
          {"dram_throughput_ratio", kernel.dram_throughput_ratio()},
          {"memory_throughput_ratio", kernel.memory_throughput_ratio()},
          {"tensor_pipe_ratio", kernel.tensor_pipe_ratio()},
          {"verdict", kernel.verdict()},
          {"remedy", DisplayRemedy(report, kernel)},
          {"source", kernel.source()},
          {"flops", kernel.flops()},
          {"bytes", kernel.bytes()}};
}

int RequestProfile(const ClientOptions& options, const std::string& job_id, int64_t start_step,
                   int64_t steps, bool counters) {
  auto stub = v1::JobService::NewStub(Connect(options));
  v1::ProfileRequest request;
  request.set_id(job_id);
  request.set_start_step(start_step);
  request.set_steps(steps);
  request.set_counters(counters);
  v1::StartProfileResponse response;
  grpc::ClientContext context;
  SetUnaryDeadline(&context);
  grpc::Status status = stub->StartProfile(&context, request, &response);
  if (!status.ok()) return Fail(DescribeError(status, options, job_id));
  if (options.json) {
    std::cout << nlohmann::json{{"id", job_id}, {"start_step", start_step}, {"steps", steps}}.dump()
              << std::endl;
  } else {
    std::cout << "job " << job_id << ": profiling " << steps << " step(s) from "
              << (start_step > 0 ? "step " + std::to_string(start_step) : "the next step")
              << "; see it with fsdpctl profile " << job_id << std::endl;
  }
  return 0;
}

// Writes the roofline chart of `report` to `path`; an error message, or "" on success. `bytes`
// is the size written.
std::string WriteRoofline(const v1::ProfileReport& report, const std::string& job_id,
                          const std::string& path, int64_t* bytes) {
  RooflineOptions chart;
  chart.title = job_id + " rank " + std::to_string(report.rank()) + " on " + report.device() +
                ", steps " + std::to_string(report.start_step()) + ".." +
                std::to_string(report.start_step() + report.steps() - 1);
  absl::StatusOr<std::string> svg = RenderRooflineSvg(report, chart);
  if (!svg.ok()) return "--roofline: " + std::string(svg.status().message());
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file || !(file << *svg) || !file.flush()) {
    return "--roofline: cannot write " + path;
  }
  *bytes = static_cast<int64_t>(svg->size());
  return "";
}

}  // namespace

int RunProfile(const ClientOptions& options, const std::string& job_id, int rank,
               int64_t start_step, int64_t steps, bool counters, const std::string& roofline_path) {
  if (steps < 0) return Fail("--steps: must not be negative");
  if (start_step < 0) return Fail("--start: must not be negative");
  if (steps > 0 && !roofline_path.empty()) {
    return Fail("--roofline draws a recorded window; it does not go with --steps");
  }
  if (counters && steps == 0) return Fail("--counters goes with --steps (it asks for a window)");
  if (steps > 0) return RequestProfile(options, job_id, start_step, steps, counters);

  auto stub = v1::JobService::NewStub(Connect(options));
  v1::GetProfileRequest request;
  request.set_id(job_id);
  request.set_rank(rank);
  v1::ProfileReport report;
  grpc::ClientContext context;
  SetUnaryDeadline(&context);
  grpc::Status status = stub->GetProfile(&context, request, &report);
  if (!status.ok()) return Fail(DescribeError(status, options, job_id));
  int64_t roofline_bytes = 0;
  if (!roofline_path.empty()) {
    if (std::string error = WriteRoofline(report, job_id, roofline_path, &roofline_bytes);
        !error.empty()) {
      return Fail(error);
    }
  }

  if (options.json) {
    nlohmann::json kernels = nlohmann::json::array();
    for (const v1::KernelStat& kernel : report.kernels())
      kernels.push_back(KernelToJson(report, kernel));
    nlohmann::json out{{"id", job_id},
                       {"rank", report.rank()},
                       {"attempt", report.attempt()},
                       {"device", report.device()},
                       {"start_step", report.start_step()},
                       {"steps", report.steps()},
                       {"peak_flops_per_second", report.peak_flops_per_second()},
                       {"peak_bytes_per_second", report.peak_bytes_per_second()},
                       {"kernels", kernels}};
    if (!roofline_path.empty()) {
      out["roofline"] = {{"path", roofline_path}, {"bytes", roofline_bytes}};
    }
    std::cout << out.dump() << std::endl;
    return 0;
  }
  std::cout << FormatKernelTable(report, job_id);
  // Where the chart went, as export and trace say where their files went.
  if (!roofline_path.empty()) {
    std::cout << "wrote the roofline chart (" << FormatBytes(roofline_bytes) << ") to "
              << roofline_path << "\n";
  }
  std::cout << std::flush;
  return 0;
}

int RunTrace(const ClientOptions& options, const std::string& job_id, int rank,
             const std::string& output_path) {
  if (output_path.empty()) return Fail("-o: an output file is required");
  auto stub = v1::JobService::NewStub(Connect(options));
  v1::GetTraceRequest request;
  request.set_id(job_id);
  request.set_rank(rank);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::FileChunk>> reader = stub->GetTrace(&context, request);
  return DownloadFile(&context, reader.get(), options, job_id, output_path, "trace");
}

}  // namespace fsdpd::client
