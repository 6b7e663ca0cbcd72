#include "client/profile_table.h"

#include <cstdio>
#include <sstream>
#include <vector>

#include "client/output.h"

namespace fsdpd::client {
namespace {

constexpr char kCommunication[] = "communication";

std::string Percent(double ratio) {
  if (ratio < 0) return "-";
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "%.1f", ratio * 100.0);
  return buffer;
}

std::string Fixed(double value, const char* format) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

// The verdict a remedy answers: the row's, or "communication" for a collective.
std::string RemedyHeading(const v1::KernelStat& kernel) {
  if (!kernel.verdict().empty()) return kernel.verdict();
  return kernel.phase() == "comm" ? kCommunication : kernel.phase();
}

// What to do on a CPU about each verdict of docs/profiling.md.
const char* CpuRemedy(const std::string& heading) {
  if (heading == "memory-bound") {
    return "fuse it with its neighbours so its data is read once, or raise the batch so each "
           "byte read does more work";
  }
  if (heading == "compute-bound") {
    return "it runs near this host's measured FLOP rate: more cores for OpenBLAS, fewer FLOPs "
           "(activation_recompute: none), or a GPU (parallel.device: cuda)";
  }
  if (heading == "latency-or-mixed") {
    return "too little work per call: raise the batch or sequence so each op does more, or fuse "
           "small ops";
  }
  if (heading == kCommunication) {
    return "overlap it with compute (prefetch the next unit's all-gather), or move fewer, larger "
           "messages (fewer and larger FSDP units)";
  }
  return nullptr;
}

}  // namespace

bool IsCpuWindow(const v1::ProfileReport& report) { return report.device() == "cpu"; }

std::string ProfileBasis(const v1::ProfileReport& report) {
  if (IsCpuWindow(report)) {
    return "estimate: times from host timers; FLOP % and BW % from each op's FLOPs and bytes "
           "against this host's measured peaks (no hardware counters on a CPU)";
  }
  bool counters = false, estimated = false;
  for (const v1::KernelStat& kernel : report.kernels()) {
    if (kernel.sm_throughput_ratio() < 0) continue;  // no figures to explain
    (kernel.source() == "cupti" ? counters : estimated) = true;
  }
  if (estimated && counters) {
    return "SM % and HBM % from hardware counters (CUPTI) where read, else the analytic "
           "estimate from each kernel's FLOPs and bytes";
  }
  if (estimated) {
    return "estimate: SM % and HBM % from each kernel's FLOPs and bytes against the device's "
           "peaks (no hardware counters in this window; --counters reads them)";
  }
  return "SM % and HBM % from hardware counters (CUPTI)";
}

std::string DisplayRemedy(const v1::ProfileReport& report, const v1::KernelStat& kernel) {
  if (kernel.remedy().empty() || !IsCpuWindow(report)) return kernel.remedy();
  const char* cpu = CpuRemedy(RemedyHeading(kernel));
  return cpu != nullptr ? cpu : kernel.remedy();
}

std::string FormatKernelTable(const v1::ProfileReport& report, const std::string& job_id) {
  std::ostringstream out;
  out << "job " << job_id << ", rank " << report.rank() << " on " << report.device() << ": steps "
      << report.start_step() << ".." << report.start_step() + report.steps() - 1 << "\n"
      << ProfileBasis(report) << "\n";
  const bool cpu = IsCpuWindow(report);
  std::vector<std::vector<std::string>> rows;
  for (const v1::KernelStat& kernel : report.kernels()) {
    rows.push_back({kernel.name(), kernel.unit().empty() ? "-" : kernel.unit(), kernel.phase(),
                    std::to_string(kernel.calls()), Fixed(kernel.total_seconds() * 1000.0, "%.3f"),
                    Fixed(kernel.percent_of_total(), "%.1f"), Percent(kernel.sm_throughput_ratio()),
                    Percent(kernel.dram_throughput_ratio()),
                    kernel.verdict().empty() ? "-" : kernel.verdict()});
  }
  out << FormatTable({"KERNEL", "UNIT", "PHASE", "CALLS", "TOTAL MS", "TIME %",
                      cpu ? "FLOP % (EST)" : "SM %", cpu ? "BW % (EST)" : "HBM %", "VERDICT"},
                     rows);
  // The remedies, once per verdict, for the kernel that takes the most time (rows come sorted).
  std::vector<std::string> seen;
  for (const v1::KernelStat& kernel : report.kernels()) {
    const std::string remedy = DisplayRemedy(report, kernel);
    if (remedy.empty()) continue;
    const std::string heading = RemedyHeading(kernel);
    bool repeated = false;
    for (const std::string& done : seen) repeated = repeated || done == heading;
    if (repeated) continue;
    seen.push_back(heading);
    out << heading << " (e.g. " << kernel.name() << "): " << remedy << "\n";
  }
  return out.str();
}

}  // namespace fsdpd::client
