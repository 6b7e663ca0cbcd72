#include "server/report_pacer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace fsdpd::server {

ReportPacer::Rules ReportPacer::RulesFor(std::chrono::milliseconds heartbeat_interval,
                                         std::chrono::milliseconds heartbeat_timeout) {
  Rules rules;
  rules.heartbeat_interval = heartbeat_interval;
  rules.max_interval = std::max(heartbeat_interval, heartbeat_timeout / 4);
  // A quarter of a beat behind: workers' reports already wait longer than a beat would.
  rules.engage_lag = std::max(std::chrono::milliseconds(1), heartbeat_interval / 4);
  rules.calm_lag = std::max(std::chrono::milliseconds(1), heartbeat_interval / 20);
  return rules;
}

void ReportPacer::Set(std::chrono::milliseconds interval, Clock::time_point now) {
  interval_millis_.store(interval.count(), std::memory_order_relaxed);
  changed_at_ = now;
}

std::string ReportPacer::Update(std::chrono::milliseconds lag, Clock::time_point now) {
  const std::chrono::milliseconds current = interval();
  if (lag > rules_.engage_lag) {
    calm_ = false;
    if (current.count() == 0) {
      ++engagements_;
      Set(rules_.heartbeat_interval, now);
      return absl::StrCat("step reports paced: the coordinator lags ", lag.count(),
                          " ms behind its workers (bound ", rules_.engage_lag.count(),
                          " ms); workers send them with heartbeats, one every ",
                          rules_.heartbeat_interval.count(), " ms");
    }
    if (current < rules_.max_interval && now - changed_at_ >= rules_.settle) {
      const auto slower = std::min(rules_.max_interval, current * 2);
      Set(slower, now);
      return absl::StrCat("step reports paced further: still ", lag.count(),
                          " ms behind; one heartbeat with reports every ", slower.count(), " ms");
    }
    return "";
  }
  if (lag >= rules_.calm_lag) {
    calm_ = false;
    return "";
  }
  if (!calm_) {
    calm_ = true;
    calm_since_ = now;
  }
  if (current.count() == 0 || now - calm_since_ < rules_.calm_for ||
      now - changed_at_ < rules_.settle) {
    return "";
  }
  if (current <= rules_.heartbeat_interval) {
    Set(std::chrono::milliseconds(0), now);
    return "step reports no longer paced: the coordinator kept up for " +
           absl::StrCat(rules_.calm_for.count() / 1000, " s");
  }
  const auto faster = std::max(rules_.heartbeat_interval, current / 2);
  Set(faster, now);
  // Each easing step waits calm_for again: the load may return.
  calm_since_ = now;
  return absl::StrCat("step reports paced less: one heartbeat with reports every ", faster.count(),
                      " ms");
}

}  // namespace fsdpd::server
