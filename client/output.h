// Output formatting for fsdpctl: tables and numbers for people, JSON objects for scripts.
// The JSON field names are a contract (README.md): tests and scripts rely on them. Also the
// check that what fsdpctl sends can be sent: proto3 strings hold only UTF-8.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fsdpd/v1/jobs.pb.h"
#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"
#include "proto/spec/field_errors.h"

namespace fsdpd::client {

std::string StateName(v1::JobState state);
// Who submitted a job or caused a state change: a principal ("token:alice"), "fsdpd" for the
// coordinator, or "anonymous" for a caller without credentials (authentication off).
std::string ActorName(const std::string& principal);
std::string WorkerStateName(v1::WorkerState state);
// Accepts a state name in any case ("running", "RUNNING").
std::optional<v1::JobState> ParseJobState(const std::string& name);
bool IsTerminal(v1::JobState state);

nlohmann::json JobToJson(const v1::Job& job);
nlohmann::json StepEventToJson(const v1::StepReport& step);
nlohmann::json StateEventToJson(const v1::StateChange& change);
nlohmann::json WorkerToJson(const v1::Worker& worker);
nlohmann::json LogLineToJson(const v1::LogLine& line);

// Left-aligned columns separated by two spaces.
std::string FormatTable(const std::vector<std::string>& headers,
                        const std::vector<std::vector<std::string>>& rows);
std::string FormatDuration(double seconds);  // "45s", "3m05s", "1h02m"
std::string FormatRate(double per_second);   // "950", "12.3k", "4.1M"
std::string FormatBytes(int64_t bytes);      // "512 B", "1.5 GiB"
std::string FormatLoss(double loss);
std::string FormatTime(int64_t unix_millis);  // local "2026-12-02 14:03:07", "-" for 0
std::string FormatAge(int64_t unix_millis);   // "5m ago"

// Every set string field of `message` (nested messages and repeated fields included) that is
// not valid UTF-8 fails with its path ("name", "data.path", "tags[2]"): proto3 refuses to carry
// it, and sent anyway it would fail without naming the field.
void ValidateUtf8Strings(const google::protobuf::Message& message, FieldErrors& errors);

}  // namespace fsdpd::client
