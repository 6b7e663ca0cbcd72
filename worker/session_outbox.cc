#include "worker/session_outbox.h"

#include <algorithm>
#include <utility>

namespace fsdpd {

Outbox::Outbox(size_t telemetry_capacity)
    : telemetry_capacity_(telemetry_capacity == 0 ? 1 : telemetry_capacity) {}

void Outbox::PushTelemetry(v1::WorkerMessage message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (telemetry_.size() >= telemetry_capacity_) {
      // A profile's trace is only useful whole, so steps and log lines go first; a committed
      // checkpoint is kept (the coordinator lists it).
      auto victim =
          std::find_if(telemetry_.begin(), telemetry_.end(), [](const v1::WorkerMessage& queued) {
            return !queued.has_profile() && !queued.has_checkpoint();
          });
      if (victim == telemetry_.end()) {
        victim =
            std::find_if(telemetry_.begin(), telemetry_.end(),
                         [](const v1::WorkerMessage& queued) { return !queued.has_checkpoint(); });
      }
      if (victim == telemetry_.end()) victim = telemetry_.begin();
      dropped_.count++;
      dropped_.job_id = victim->has_step()         ? victim->step().job_id()
                        : victim->has_profile()    ? victim->profile().job_id()
                        : victim->has_checkpoint() ? victim->checkpoint().job_id()
                                                   : victim->log().job_id();
      telemetry_.erase(victim);
    }
    telemetry_.push_back(std::move(message));
  }
  changed_.notify_all();
}

void Outbox::PushFinished(FinishedAttempt attempt) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_.push_back(std::move(attempt));
  }
  changed_.notify_all();
}

void Outbox::PushExport(FinishedExport finished) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    exports_.push_back(std::move(finished));
  }
  changed_.notify_all();
}

std::optional<FinishedExport> Outbox::FrontExport() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (exports_.empty()) return std::nullopt;
  return exports_.front();
}

void Outbox::PopExport() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!exports_.empty()) exports_.pop_front();
}

void Outbox::WaitForWork(std::chrono::steady_clock::time_point until, bool hold_steps) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_until(lock, until, [&] {
    const bool telemetry = !telemetry_.empty() && !(hold_steps && telemetry_.front().has_step());
    return woken_ || telemetry || !finished_.empty() || !exports_.empty();
  });
  woken_ = false;
}

void Outbox::Wake() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    woken_ = true;
  }
  changed_.notify_all();
}

std::optional<v1::WorkerMessage> Outbox::FrontTelemetry() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (telemetry_.empty()) return std::nullopt;
  return telemetry_.front();
}

void Outbox::PopTelemetry() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (telemetry_.empty()) return;
  const v1::WorkerMessage& front = telemetry_.front();
  if (front.has_step() || front.has_checkpoint() ||
      (front.has_log() && front.log().sequence() > 0)) {
    // Beyond the bound the oldest is forgotten unconfirmed, as the queue drops its oldest.
    if (unconfirmed_.size() >= telemetry_capacity_) unconfirmed_.pop_front();
    unconfirmed_.push_back(std::move(telemetry_.front()));
  }
  telemetry_.pop_front();
}

std::vector<v1::StepReport> Outbox::TakeLeadingSteps(size_t max) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<v1::StepReport> steps;
  while (steps.size() < max && !telemetry_.empty() && telemetry_.front().has_step()) {
    steps.push_back(telemetry_.front().step());
    if (unconfirmed_.size() >= telemetry_capacity_) unconfirmed_.pop_front();
    unconfirmed_.push_back(std::move(telemetry_.front()));
    telemetry_.pop_front();
  }
  return steps;
}

bool Outbox::HasFinished() {
  std::lock_guard<std::mutex> lock(mutex_);
  return !finished_.empty();
}

void Outbox::ConfirmStored(const v1::ReportsStored& stored) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto confirmed = [&](const v1::WorkerMessage& message) {
    if (message.has_step()) {
      const v1::StepReport& report = message.step();
      return report.job_id() == stored.job_id() && report.attempt() == stored.attempt() &&
             report.step() <= stored.through_step();
    }
    if (message.has_checkpoint()) {
      const v1::CheckpointCommitted& checkpoint = message.checkpoint();
      return checkpoint.job_id() == stored.job_id() && checkpoint.attempt() == stored.attempt() &&
             checkpoint.step() <= stored.through_checkpoint_step();
    }
    const v1::LogLine& line = message.log();
    return line.job_id() == stored.job_id() && line.attempt() == stored.attempt() &&
           line.sequence() <= stored.through_log_sequence();
  };
  unconfirmed_.erase(std::remove_if(unconfirmed_.begin(), unconfirmed_.end(), confirmed),
                     unconfirmed_.end());
}

void Outbox::RequeueUnconfirmed() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    while (!unconfirmed_.empty()) {
      telemetry_.push_front(std::move(unconfirmed_.back()));
      unconfirmed_.pop_back();
    }
  }
  changed_.notify_all();
}

size_t Outbox::UnconfirmedCount() {
  std::lock_guard<std::mutex> lock(mutex_);
  return unconfirmed_.size();
}

std::optional<FinishedAttempt> Outbox::FrontFinished() {
  std::lock_guard<std::mutex> lock(mutex_);
  // A result goes out only after every report queued before it.
  if (finished_.empty() || !telemetry_.empty()) return std::nullopt;
  return finished_.front();
}

void Outbox::PopFinished() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!finished_.empty()) finished_.pop_front();
}

bool Outbox::Empty() {
  std::lock_guard<std::mutex> lock(mutex_);
  return telemetry_.empty() && finished_.empty() && exports_.empty();
}

std::optional<v1::AttemptResult> Outbox::OldestUnsentResult() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_.empty()) return std::nullopt;
  return finished_.front().result;
}

Outbox::Dropped Outbox::TakeDropped() {
  std::lock_guard<std::mutex> lock(mutex_);
  Dropped taken = dropped_;
  dropped_ = Dropped{};
  return taken;
}

}  // namespace fsdpd
