#include "bench/control_plane_fleet.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "proto/spec/job_spec.h"

namespace fsdpd::bench {

v1::JobSpec TinyJobSpec(int world_size, const std::string& name) {
  v1::JobSpec spec = DefaultJobSpec();
  spec.set_name(name);
  spec.mutable_model()->set_vocab(256);
  spec.mutable_model()->set_dim(32);
  spec.mutable_model()->set_layers(1);
  spec.mutable_model()->set_heads(2);
  spec.mutable_model()->set_ffn_mult(2);
  spec.mutable_data()->set_source("synthetic");
  spec.mutable_data()->set_seq_len(16);
  spec.mutable_train()->set_batch_size(1);
  spec.mutable_train()->set_steps(1000000);  // never reached: the workers send no result
  spec.mutable_parallel()->set_world_size(world_size);
  spec.mutable_parallel()->set_device("cpu");
  spec.mutable_parallel()->set_param_dtype("fp32");
  spec.mutable_parallel()->set_reduce_dtype("fp32");
  spec.mutable_checkpoint()->set_every_steps(0);
  spec.mutable_profile()->set_steps(0);
  return spec;
}

namespace {

constexpr auto kTickPeriod = std::chrono::milliseconds(100);  // 10 step reports/s per worker
constexpr int kSlotsPerTick = 20;                             // spreads the sends over 5 ms slots
constexpr int kTicksPerHeartbeat = 10;                        // one heartbeat a second

int64_t UnixMillisNow() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

SimulatedWorker::SimulatedWorker(std::shared_ptr<grpc::Channel> channel, std::string hostname,
                                 int index)
    : channel_(std::move(channel)),
      stub_(v1::WorkerService::NewStub(channel_)),
      hostname_(std::move(hostname)),
      index_(index) {}

absl::Status SimulatedWorker::RegisterAndOpen() {
  v1::RegisterRequest request;
  request.set_hostname(hostname_);
  request.set_device_kind("cpu");
  request.set_gpu_index(index_ % 8);
  request.set_memory_bytes(int64_t{64} << 30);
  request.set_address("127.0.0.1");
  v1::RegisterResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  const grpc::Status status = stub_->Register(&context, request, &response);
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("Register of simulated worker ", index_, ": ", status.error_message()));
  }
  worker_id_ = response.worker_id();
  stub_->async()->Session(&context_, this);
  StartRead(&incoming_);
  v1::WorkerMessage hello;
  hello.set_worker_id(worker_id_);
  hello.mutable_heartbeat()->set_unix_millis(UnixMillisNow());
  hello.mutable_heartbeat()->set_sequence(++beats_);
  Enqueue(std::move(hello));
  StartCall();
  return absl::OkStatus();
}

void SimulatedWorker::Enqueue(v1::WorkerMessage message) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (done_) return;
  queue_.push_back(std::move(message));
  max_queue_ = std::max(max_queue_, queue_.size());
  if (writing_) return;
  writing_ = true;
  const v1::WorkerMessage* next = &queue_.front();
  lock.unlock();
  StartWrite(next);
}

void SimulatedWorker::OnWriteDone(bool ok) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!ok) {
    // The stream broke; OnDone follows. What is queued was never sent and is not counted.
    writing_ = false;
    queue_.clear();
    return;
  }
  if (queue_.front().has_step()) {
    ++steps_written_;
  } else if (queue_.front().has_heartbeat()) {
    ++heartbeats_written_;
    steps_written_ += queue_.front().heartbeat().steps_size();
  }
  queue_.pop_front();
  if (queue_.empty()) {
    writing_ = false;
    return;
  }
  const v1::WorkerMessage* next = &queue_.front();
  lock.unlock();
  StartWrite(next);
}

void SimulatedWorker::OnReadDone(bool ok) {
  if (!ok) return;  // the coordinator ended the stream; OnDone follows
  std::optional<v1::WorkerMessage> accepted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (incoming_.has_assignment()) {
      const v1::Assignment& assignment = incoming_.assignment();
      job_id_ = assignment.job_id();
      attempt_ = assignment.attempt();
      rank_ = assignment.rank();
      next_step_ = 1;
      ++assignments_;
      // As a real worker does once it starts the rank: the coordinator's SCHEDULED deadline
      // waits for this (or a first step report), not for the rendezvous.
      accepted.emplace();
      v1::AssignmentAccepted& answer = *accepted->mutable_accepted();
      answer.set_job_id(assignment.job_id());
      answer.set_job_uid(assignment.job_uid());
      answer.set_attempt(assignment.attempt());
      answer.set_rank(assignment.rank());
    } else if (incoming_.has_cancellation() && incoming_.cancellation().job_id() == job_id_) {
      job_id_.clear();
      cancelled_ = true;
    } else if (incoming_.has_heartbeat_ack()) {
      ++acks_received_;
      paced_millis_ = incoming_.paced_interval_millis();
      max_paced_millis_ = std::max(max_paced_millis_, paced_millis_);
      for (const v1::ReportsStored& stored : incoming_.reports_stored()) {
        if (stored.job_id() == job_id_ && stored.attempt() == attempt_) {
          confirmed_step_ = std::max(confirmed_step_, stored.through_step());
        }
      }
    }
  }
  if (accepted.has_value()) Enqueue(*std::move(accepted));
  StartRead(&incoming_);
}

void SimulatedWorker::OnDone(const grpc::Status& status) {
  std::lock_guard<std::mutex> lock(mutex_);
  done_ = true;
}

void SimulatedWorker::Tick(int64_t tick, bool stepping, int ticks_per_step) {
  // As a real worker does (worker/session_stream.cc): while the coordinator paces the fleet,
  // beat at its interval and send the step reports inside the heartbeats.
  std::optional<v1::WorkerMessage> beat;
  bool paced = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    paced = paced_millis_ > 0;
    const int64_t beat_ticks = std::max<int64_t>(kTicksPerHeartbeat, paced_millis_ / 100);
    if (tick % beat_ticks == index_ % beat_ticks) {
      beat.emplace();
      beat->mutable_heartbeat()->set_unix_millis(UnixMillisNow());
      beat->mutable_heartbeat()->set_sequence(++beats_);
      for (v1::StepReport& step : held_steps_) {
        *beat->mutable_heartbeat()->add_steps() = std::move(step);
      }
      held_steps_.clear();
    }
  }
  if (beat.has_value()) Enqueue(*std::move(beat));
  if (!stepping || tick % ticks_per_step != index_ % ticks_per_step) return;
  v1::WorkerMessage message;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (job_id_.empty() || done_) return;
    v1::StepReport* step = message.mutable_step();
    step->set_job_id(job_id_);
    step->set_attempt(attempt_);
    step->set_rank(rank_);
    step->set_step(next_step_++);
    // Plausible figures of a tiny CPU model, so the aggregates and gauges do real work.
    step->set_loss(5.5 - 0.001 * static_cast<double>(step->step()));
    step->set_tokens_per_second(2048);
    step->set_step_seconds(0.1);
    step->set_compute_seconds(0.08);
    step->set_exposed_comm_seconds(0.01);
    step->set_mfu_ratio(0.05);
    step->set_memory_current_bytes(int64_t{96} << 20);
    step->set_memory_peak_bytes(int64_t{128} << 20);
    step->set_lr(3e-3);
    step->set_grad_norm(1.0);
    step->set_unix_millis(UnixMillisNow());
    if (paced) {
      held_steps_.push_back(std::move(*step));
      return;
    }
  }
  Enqueue(std::move(message));
}

bool SimulatedWorker::Assigned() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !job_id_.empty();
}

bool SimulatedWorker::Idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !writing_;
}

WorkerTally SimulatedWorker::Tally() const {
  std::lock_guard<std::mutex> lock(mutex_);
  WorkerTally tally;
  tally.worker_id = worker_id_;
  tally.job_id = job_id_;
  tally.attempt = attempt_;
  tally.rank = rank_;
  tally.steps_written = steps_written_;
  tally.heartbeats_written = heartbeats_written_;
  tally.acks_received = acks_received_;
  tally.confirmed_step = confirmed_step_;
  tally.queued_steps = static_cast<int64_t>(held_steps_.size());
  for (const v1::WorkerMessage& queued : queue_) {
    tally.queued_steps += queued.has_step() ? 1 : queued.heartbeat().steps_size();
  }
  tally.max_paced_millis = max_paced_millis_;
  tally.max_queue = max_queue_;
  tally.stream_ended = done_;
  tally.assignments = assignments_;
  tally.cancelled = cancelled_;
  return tally;
}

Fleet::Fleet(FleetConfig config) : config_(std::move(config)) {}

Fleet::~Fleet() {
  StopTicking();
  // A reactor must outlive its OnDone; streams still open when the fleet goes are left alone.
  for (std::unique_ptr<SimulatedWorker>& worker : workers_) {
    if (!worker->Tally().stream_ended) worker.release();
  }
}

absl::Status Fleet::Start() {
  for (int index = 0; index < config_.workers; ++index) {
    if (index % config_.workers_per_connection == 0) {
      grpc::ChannelArguments arguments;
      // A private subchannel pool gives every channel its own TCP connection, as separate
      // worker processes would have.
      arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      channels_.push_back(
          grpc::CreateCustomChannel(config_.target, grpc::InsecureChannelCredentials(), arguments));
    }
    workers_.push_back(std::make_unique<SimulatedWorker>(
        channels_.back(), absl::StrCat("load-host-", index / config_.workers_per_host), index));
  }
  for (int thread = 0; thread < config_.tick_threads; ++thread) {
    threads_.emplace_back([this, thread] { TickLoop(thread); });
  }
  for (std::unique_ptr<SimulatedWorker>& worker : workers_) {
    if (absl::Status status = worker->RegisterAndOpen(); !status.ok()) return status;
    ++opened_;
  }
  return absl::OkStatus();
}

void Fleet::TickLoop(int thread_index) {
  const auto start = std::chrono::steady_clock::now();
  const auto slot = kTickPeriod / kSlotsPerTick;
  const int ticks_per_step = std::max(1, 10 / config_.reports_per_second);
  for (int64_t tick = 0; !stop_; ++tick) {
    for (int slot_index = 0; slot_index < kSlotsPerTick && !stop_; ++slot_index) {
      const auto due = start + tick * kTickPeriod + slot_index * slot;
      std::this_thread::sleep_until(due);
      if (std::chrono::steady_clock::now() - due > kTickPeriod) ++late_slots_;
      const bool stepping = stepping_;
      const size_t opened = opened_;
      for (size_t index = thread_index; index < opened;
           index += static_cast<size_t>(config_.tick_threads)) {
        if (static_cast<int>((index / config_.tick_threads) % kSlotsPerTick) != slot_index) {
          continue;
        }
        workers_[index]->Tick(tick, stepping, ticks_per_step);
      }
    }
  }
}

bool Fleet::WaitForAssignments(int count, std::chrono::seconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (AssignedCount() >= count) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return AssignedCount() >= count;
}

int Fleet::AssignedCount() const {
  return static_cast<int>(std::count_if(workers_.begin(), workers_.end(),
                                        [](const auto& worker) { return worker->Assigned(); }));
}

bool Fleet::WaitForDrain(std::chrono::seconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::all_of(workers_.begin(), workers_.end(),
                    [](const auto& worker) { return worker->Idle(); })) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

bool Fleet::WaitForConfirmations(std::chrono::seconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto confirmed = [](const auto& worker) {
    const WorkerTally tally = worker->Tally();
    return tally.job_id.empty() ||
           (tally.queued_steps == 0 && tally.confirmed_step >= tally.steps_written);
  };
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::all_of(workers_.begin(), workers_.end(), confirmed)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

void Fleet::StopTicking() {
  stop_ = true;
  for (std::thread& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
}

std::vector<WorkerTally> Fleet::Tallies() const {
  std::vector<WorkerTally> tallies;
  tallies.reserve(workers_.size());
  for (const auto& worker : workers_) tallies.push_back(worker->Tally());
  return tallies;
}

}  // namespace fsdpd::bench
