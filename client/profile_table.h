// The kernel table `fsdpctl profile JOB` prints for people, with its remedies.
//
// What the figures rest on is said above the table. A CPU window is an estimate: times from
// host timers, and each op's compute and memory shares from its FLOPs and bytes against the
// host's measured peaks (a GEMM's FLOP rate, a copy's bandwidth). Its table therefore has no SM
// or HBM columns but "FLOP % (EST)" and "BW % (EST)", and CPU remedies instead of the worker's
// GPU ones (Triton, FP8, bf16 parameters). A GPU window keeps SM % and HBM %, said to be the
// analytic estimate where the window read no hardware counters.
//
// Remedy lines name their verdict ("memory-bound (e.g. add): ..."); collectives, which have no
// compute/memory verdict, are "communication".
#pragma once

#include <string>

#include "fsdpd/v1/profile.pb.h"

namespace fsdpd::client {

// True for a window of the CPU backend.
bool IsCpuWindow(const v1::ProfileReport& report);

// The line that says where the table's figures come from.
std::string ProfileBasis(const v1::ProfileReport& report);

// The remedy fsdpctl shows for a row (also in --json): the worker's, or on a CPU window the
// CPU remedy for the row's verdict.
std::string DisplayRemedy(const v1::ProfileReport& report, const v1::KernelStat& kernel);

// The header line, the basis, the table and one remedy line per verdict (for the kernel with
// the most time), each ending in a newline.
std::string FormatKernelTable(const v1::ProfileReport& report, const std::string& job_id);

}  // namespace fsdpd::client
