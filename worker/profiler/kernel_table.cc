#include "worker/profiler/kernel_table.h"

#include <algorithm>

namespace fsdpd {

void KernelTableBuilder::Add(const ProfileEvent& event) {
  if (event.lane == ProfileLane::kHost) return;
  Totals& totals = rows_[{event.name, event.unit, event.phase}];
  totals.calls += 1;
  totals.seconds += event.duration_seconds;
  if (event.flops < 0.0) totals.flops_known = false;
  if (event.bytes < 0.0) totals.bytes_known = false;
  totals.flops += std::max(event.flops, 0.0);
  totals.bytes += std::max(event.bytes, 0.0);
}

void KernelTableBuilder::AddCounters(const ProfileEvent& event, const CounterRatios& ratios) {
  Totals& totals = rows_[{event.name, event.unit, event.phase}];
  // A launch without a measured duration still counts, with a tiny weight.
  const double weight = std::max(event.duration_seconds, 1e-12);
  auto add = [weight](double reading, double& sum, double& covered) {
    if (reading < 0.0) return;
    sum += reading * weight;
    covered += weight;
  };
  add(ratios.sm, totals.weighted_sums.sm, totals.weights.sm);
  add(ratios.memory, totals.weighted_sums.memory, totals.weights.memory);
  add(ratios.dram, totals.weighted_sums.dram, totals.weights.dram);
  add(ratios.tensor_pipe, totals.weighted_sums.tensor_pipe, totals.weights.tensor_pipe);
}

std::vector<v1::KernelStat> KernelTableBuilder::Build(const RooflinePeaks* peaks) const {
  double all_seconds = 0.0;
  for (const auto& [key, totals] : rows_) all_seconds += totals.seconds;
  std::vector<v1::KernelStat> table;
  table.reserve(rows_.size());
  for (const auto& [key, totals] : rows_) {
    v1::KernelStat row;
    row.set_name(std::get<0>(key));
    row.set_unit(std::get<1>(key));
    row.set_phase(std::get<2>(key));
    row.set_calls(totals.calls);
    row.set_total_seconds(totals.seconds);
    row.set_percent_of_total(all_seconds > 0.0 ? 100.0 * totals.seconds / all_seconds : 0.0);
    row.set_flops(totals.flops_known ? totals.flops : -1.0);
    row.set_bytes(totals.bytes_known ? totals.bytes : -1.0);
    if (totals.weights.sm > 0.0 || totals.weights.dram > 0.0) {
      auto mean = [](double sum, double covered) { return covered > 0.0 ? sum / covered : -1.0; };
      row.set_sm_throughput_ratio(mean(totals.weighted_sums.sm, totals.weights.sm));
      row.set_memory_throughput_ratio(mean(totals.weighted_sums.memory, totals.weights.memory));
      row.set_dram_throughput_ratio(mean(totals.weighted_sums.dram, totals.weights.dram));
      row.set_tensor_pipe_ratio(mean(totals.weighted_sums.tensor_pipe, totals.weights.tensor_pipe));
      row.set_source(kSourceCupti);
      ApplyVerdict(&row);
    } else {
      ApplyAnalyticRoofline(peaks != nullptr ? *peaks : RooflinePeaks{}, &row);
    }
    table.push_back(std::move(row));
  }
  // The map iterates by (name, unit, phase), so a stable sort breaks ties in that order.
  std::stable_sort(table.begin(), table.end(),
                   [](const v1::KernelStat& a, const v1::KernelStat& b) {
                     return a.total_seconds() > b.total_seconds();
                   });
  return table;
}

}  // namespace fsdpd
