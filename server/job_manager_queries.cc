// The read side of the job manager: the published view of each job and the queries that read it
// without the job manager's lock, WatchJob and GetJobLogs subscriptions, and profiling requests.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/job_manager.h"

namespace fsdpd::server {
namespace {

// A damaged page of the store (DATA_LOSS) says what it cost: this part of this job. The rest of
// the store is read from other pages and keeps answering.
absl::Status NameDamage(const absl::Status& status, const char* what, const std::string& job_id) {
  if (!absl::IsDataLoss(status)) return status;
  return absl::DataLossError(absl::StrCat(
      "the stored ", what, " of job ", job_id, " are damaged (", status.message(),
      "); the job's state and spec, and other jobs, still answer; docs/operations.md, \"When the "
      "store or its volume fails\", says how to recover"));
}

}  // namespace

void JobManager::PublishLocked(const JobRecord& record, bool progress_only) {
  if (deferring_publish_) {
    auto [entry, added] = unpublished_.emplace(&record, !progress_only);
    if (!added) entry->second = entry->second || !progress_only;
    return;
  }
  const v1::Job& job = record.job;
  if (progress_only) {
    std::lock_guard<std::mutex> lock(view_mutex_);
    auto found = view_.find(job.id());
    if (found != view_.end()) {
      found->second.step = job.step();
      found->second.loss = job.loss();
      found->second.tokens_per_second = job.tokens_per_second();
      return;
    }
  }
  PublishedJob published{std::make_shared<const v1::Job>(job), job.step(), job.loss(),
                         job.tokens_per_second()};
  std::lock_guard<std::mutex> lock(view_mutex_);
  view_[job.id()] = std::move(published);
}

v1::Job JobManager::PublishedJob::Materialize() const {
  v1::Job copy = *job;
  copy.set_step(step);
  copy.set_loss(loss);
  copy.set_tokens_per_second(tokens_per_second);
  return copy;
}

absl::StatusOr<v1::Job> JobManager::Get(const std::string& job_id) const {
  PublishedJob published;
  {
    std::lock_guard<std::mutex> lock(view_mutex_);
    auto found = view_.find(job_id);
    if (found != view_.end()) published = found->second;
  }
  if (published.job == nullptr)
    return absl::NotFoundError(absl::StrCat("no job with id \"", job_id, "\""));
  return published.Materialize();
}

std::vector<JobManager::PublishedJob> JobManager::PublishedIn(
    const std::vector<v1::JobState>& states, int limit) const {
  std::lock_guard<std::mutex> lock(view_mutex_);
  std::vector<PublishedJob> published;
  published.reserve(view_.size());
  for (const auto& [id, view] : view_) {
    if (!states.empty() &&
        std::find(states.begin(), states.end(), view.job->state()) == states.end()) {
      continue;
    }
    published.push_back(view);
    if (limit > 0 && static_cast<int>(published.size()) >= limit) break;
  }
  return published;
}

std::vector<v1::Job> JobManager::List(const std::vector<v1::JobState>& states, int limit) const {
  // The copies are made outside the lock: publishing a step never waits for a long listing.
  const std::vector<PublishedJob> published = PublishedIn(states, limit);
  std::vector<v1::Job> jobs;
  jobs.reserve(published.size());
  for (const PublishedJob& view : published) jobs.push_back(view.Materialize());
  return jobs;
}

std::vector<v1::Job> JobManager::ListHeaders(const std::vector<v1::JobState>& states) const {
  const std::vector<PublishedJob> published = PublishedIn(states, 0);
  std::vector<v1::Job> headers(published.size());
  for (size_t i = 0; i < published.size(); ++i) {
    const v1::Job& job = *published[i].job;
    headers[i].set_id(job.id());
    headers[i].set_state(job.state());
    headers[i].set_created_unix_millis(job.created_unix_millis());
    *headers[i].mutable_labels() = job.labels();
  }
  return headers;
}

std::map<v1::JobState, int> JobManager::CountByState() const {
  std::lock_guard<std::mutex> lock(view_mutex_);
  std::map<v1::JobState, int> counts;
  for (const auto& [id, published] : view_) ++counts[published.job->state()];
  return counts;
}

absl::Status JobManager::StartProfile(const v1::ProfileRequest& request) {
  if (request.steps() <= 0 || request.start_step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "steps: must be positive and start_step not negative, got steps=", request.steps(),
        " start_step=", request.start_step()));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord* record = FindLocked(request.job_id());
  if (record == nullptr) {
    return absl::NotFoundError(absl::StrCat("no job with id \"", request.job_id(), "\""));
  }
  if (!record->active.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", request.job_id(), " is ", v1::JobState_Name(record->job.state()),
                     "; only a scheduled or running job can be profiled"));
  }
  v1::CoordinatorMessage message;
  *message.mutable_profile_request() = request;
  message.mutable_profile_request()->set_attempt(record->active->attempt);
  for (const std::string& worker_id : record->active->worker_ids) {
    workers_.Send(worker_id, message);
  }
  return absl::OkStatus();
}

absl::StatusOr<JobManager::History> JobManager::Watch(
    const std::string& job_id, const std::shared_ptr<JobSubscriber>& subscriber) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord* record = FindLocked(job_id);
  if (record == nullptr)
    return absl::NotFoundError(absl::StrCat("no job with id \"", job_id, "\""));
  if (shutting_down_) return absl::UnavailableError("coordinator shutting down");
  // Reading the history and subscribing under one lock: no event falls between the two.
  absl::StatusOr<std::vector<StoredEvent>> events =
      store_.LoadEvents(job_id, config_.watch_replay_steps);
  if (!events.ok()) return NameDamage(events.status(), "history (state changes and steps)", job_id);
  History history;
  for (StoredEvent& stored : *events) history.events.push_back(std::move(stored.event));
  history.ended = IsTerminal(record->job.state());
  if (!history.ended) record->subscribers.push_back(subscriber);
  return history;
}

absl::StatusOr<JobManager::History> JobManager::Logs(
    const std::string& job_id, int64_t tail, const std::shared_ptr<JobSubscriber>& subscriber) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord* record = FindLocked(job_id);
  if (record == nullptr)
    return absl::NotFoundError(absl::StrCat("no job with id \"", job_id, "\""));
  absl::StatusOr<std::vector<v1::LogLine>> logs = store_.LoadLogs(job_id, tail);
  if (!logs.ok()) return NameDamage(logs.status(), "log lines", job_id);
  History history;
  history.logs = std::move(*logs);
  history.ended = IsTerminal(record->job.state()) || shutting_down_;
  if (!history.ended && subscriber != nullptr) record->subscribers.push_back(subscriber);
  return history;
}

void JobManager::Unsubscribe(const std::string& job_id, const JobSubscriber* subscriber) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord* record = FindLocked(job_id);
  if (record == nullptr) return;
  auto& subscribers = record->subscribers;
  subscribers.erase(std::remove_if(subscribers.begin(), subscribers.end(),
                                   [&](const auto& kept) { return kept.get() == subscriber; }),
                    subscribers.end());
}

}  // namespace fsdpd::server
