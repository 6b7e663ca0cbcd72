#include "worker/profiler/profile_recorder.h"

#include <utility>

namespace fsdpd {
namespace {

const std::string& Empty() {
  static const std::string* const empty = new std::string();
  return *empty;
}

}  // namespace

void ProfileRecorder::Start() {
  table_.Clear();
  trace_events_.clear();
  sites_.clear();
  dropped_trace_events_ = 0;
  active_ = true;
}

const std::string& ProfileRecorder::unit() const {
  return scopes_.empty() ? Empty() : scopes_.back().unit;
}

const std::string& ProfileRecorder::phase() const {
  return scopes_.empty() ? Empty() : scopes_.back().phase;
}

void ProfileRecorder::PushScope(std::string unit, std::string phase) {
  scopes_.push_back(Scope{std::move(unit), std::move(phase)});
}

void ProfileRecorder::PopScope() {
  if (!scopes_.empty()) scopes_.pop_back();
}

uint64_t ProfileRecorder::OpenSite(std::string_view name, ProfileLane lane, bool is_op,
                                   const char* phase) {
  if (!active_ || tagger_ == nullptr) return 0;
  LaunchSite site;
  site.name = std::string(name);
  site.unit = unit();
  site.phase = phase != nullptr ? std::string(phase) : this->phase();
  site.lane = lane;
  site.is_op = is_op;
  site.start_seconds = Now();
  site.end_seconds = site.start_seconds - 1.0;
  sites_.push_back(std::move(site));
  const uint64_t id = sites_.size();
  tagger_->PushLaunchSite(id);
  return id;
}

void ProfileRecorder::CloseSite(uint64_t site) {
  if (site == 0 || site > sites_.size()) return;
  if (tagger_ != nullptr) tagger_->PopLaunchSite();
  sites_[site - 1].end_seconds = Now();
}

void ProfileRecorder::RecordOp(const char* name, ProfileLane lane, double start_seconds,
                               double duration_seconds, const OpCost* cost, std::string shapes,
                               const char* phase, uint64_t site) {
  if (!active_) return;
  if (tagger_ != nullptr) {
    if (site == 0 || site > sites_.size()) return;
    LaunchSite& launch = sites_[site - 1];
    if (cost != nullptr) {
      launch.flops = cost->flops;
      launch.bytes = cost->bytes;
    }
    launch.shapes = std::move(shapes);
    return;
  }
  ProfileEvent event;
  event.name = name;
  event.unit = unit();
  event.phase = phase != nullptr ? std::string(phase) : this->phase();
  event.lane = lane;
  event.start_seconds = start_seconds;
  event.duration_seconds = duration_seconds;
  if (cost != nullptr) {
    event.flops = cost->flops;
    event.bytes = cost->bytes;
  }
  event.shapes = std::move(shapes);
  table_.Add(event);
  AddTraceEvent(std::move(event));
}

void ProfileRecorder::RecordDeviceKernel(ProfileEvent event) {
  if (!active_ && tagger_ == nullptr) return;
  table_.Add(event);
  AddTraceEvent(std::move(event));
}

void ProfileRecorder::RecordDeviceCounters(const ProfileEvent& event, const CounterRatios& ratios) {
  table_.AddCounters(event, ratios);
}

void ProfileRecorder::RecordRange(std::string name, std::string unit, std::string phase,
                                  double start_seconds, double duration_seconds) {
  if (!active_) return;
  ProfileEvent event;
  event.name = std::move(name);
  event.unit = std::move(unit);
  event.phase = std::move(phase);
  event.lane = ProfileLane::kHost;
  event.start_seconds = start_seconds;
  event.duration_seconds = duration_seconds;
  AddTraceEvent(std::move(event));
}

void ProfileRecorder::AddTraceEvent(ProfileEvent event) {
  if (trace_events_.size() >= max_trace_events_) {
    ++dropped_trace_events_;
    return;
  }
  trace_events_.push_back(std::move(event));
}

ProfileRange::ProfileRange(ProfileRecorder* recorder, std::string_view unit, std::string_view phase,
                           std::string_view label) {
  if (recorder == nullptr || !recorder->active()) return;
  recorder_ = recorder;
  const std::string_view suffix = label.empty() ? phase : label;
  name_ = std::string(unit);
  if (!name_.empty() && !suffix.empty()) name_ += ' ';
  name_ += suffix;
  unit_ = std::string(unit);
  phase_ = std::string(phase);
  recorder_->PushScope(unit_, phase_);
  site_ = recorder_->OpenSite(name_, ProfileLane::kHost, /*is_op=*/false);
  start_seconds_ = ProfileRecorder::Now();
}

ProfileRange::~ProfileRange() {
  if (recorder_ == nullptr) return;
  const double end = ProfileRecorder::Now();
  recorder_->CloseSite(site_);
  recorder_->PopScope();
  recorder_->RecordRange(std::move(name_), std::move(unit_), std::move(phase_), start_seconds_,
                         end - start_seconds_);
}

}  // namespace fsdpd
