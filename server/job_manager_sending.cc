// What the job manager sends out: messages to workers and events to a job's subscribers, each
// held while a run's store writes are not yet committed and sent once they are.
#include "server/job_manager.h"

namespace fsdpd::server {

void JobManager::SendLocked(const std::string& worker_id, const v1::CoordinatorMessage& message) {
  if (deferring_publish_) {
    held_sends_.emplace_back(worker_id, message);
  } else {
    workers_.Send(worker_id, message);
  }
}

void JobManager::SendCancellation(const std::string& worker_id, const std::string& job_id,
                                  int attempt, const std::string& reason) {
  v1::CoordinatorMessage message;
  v1::Cancellation* cancellation = message.mutable_cancellation();
  cancellation->set_job_id(job_id);
  cancellation->set_attempt(attempt);
  cancellation->set_reason(reason);
  SendLocked(worker_id, message);
}

void JobManager::NotifyLocked(const JobRecord& record,
                              std::function<void(const std::shared_ptr<JobSubscriber>&)> notify) {
  if (record.subscribers.empty()) return;
  auto send = [subscribers = record.subscribers, notify = std::move(notify)] {
    for (const auto& subscriber : subscribers) notify(subscriber);
  };
  if (deferring_publish_) {
    held_notifications_.push_back(std::move(send));
  } else {
    send();
  }
}

void JobManager::SendHeldNotificationsLocked() {
  std::vector<std::function<void()>> held = std::move(held_notifications_);
  held_notifications_.clear();
  for (const auto& send : held) send();
}

}  // namespace fsdpd::server
