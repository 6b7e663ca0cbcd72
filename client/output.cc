#include "client/output.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <sstream>

#include "google/protobuf/util/json_util.h"

namespace fsdpd::client {

std::string StateName(v1::JobState state) { return v1::JobState_Name(state); }

std::string WorkerStateName(v1::WorkerState state) { return v1::WorkerState_Name(state); }

std::optional<v1::JobState> ParseJobState(const std::string& name) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  v1::JobState state;
  if (!v1::JobState_Parse(upper, &state) || state == v1::JOB_STATE_UNSPECIFIED) {
    return std::nullopt;
  }
  return state;
}

bool IsTerminal(v1::JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED || state == v1::CANCELLED;
}

nlohmann::json JobToJson(const v1::Job& job) {
  nlohmann::json out;
  out["id"] = job.id();
  out["uid"] = job.uid();  // unique across clusters; names the checkpoint folder
  out["owner"] = job.owner();
  out["name"] = job.spec().name();
  out["state"] = StateName(job.state());
  out["reason"] = job.reason();
  out["attempt"] = job.attempt();
  out["step"] = job.step();
  out["total_steps"] = job.spec().train().steps();
  out["loss"] = job.loss();
  out["tokens_per_second"] = job.tokens_per_second();
  out["world_size"] = job.spec().parallel().world_size();
  out["created_unix_millis"] = job.created_unix_millis();
  out["started_unix_millis"] = job.started_unix_millis();
  out["finished_unix_millis"] = job.finished_unix_millis();
  out["worker_ids"] = nlohmann::json::array();
  for (const std::string& id : job.worker_ids()) out["worker_ids"].push_back(id);
  out["transitions"] = nlohmann::json::array();
  for (const v1::StateChange& change : job.transitions()) {
    out["transitions"].push_back(StateEventToJson(change));
  }
  out["labels"] = nlohmann::json::object();
  for (const auto& [key, value] : job.labels()) out["labels"][key] = value;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  // The spec, origin and attempts as the API's JSON mapping names them.
  const auto message_json = [&options](const google::protobuf::Message& message) {
    std::string text;
    if (!google::protobuf::util::MessageToJsonString(message, &text, options).ok()) {
      return nlohmann::json();
    }
    return nlohmann::json::parse(text, nullptr, false);
  };
  out["spec"] = message_json(job.spec());
  out["origin"] = message_json(job.origin());
  out["attempts"] = nlohmann::json::array();
  for (const v1::Attempt& attempt : job.attempts())
    out["attempts"].push_back(message_json(attempt));
  return out;
}

nlohmann::json StepEventToJson(const v1::StepReport& step) {
  nlohmann::json event = {{"type", "step"},
                          {"job_id", step.job_id()},
                          {"attempt", step.attempt()},
                          {"step", step.step()},
                          {"loss", step.loss()},
                          {"tokens_per_second", step.tokens_per_second()},
                          {"step_seconds", step.step_seconds()},
                          {"compute_seconds", step.compute_seconds()},
                          {"exposed_comm_seconds", step.exposed_comm_seconds()},
                          {"mfu_ratio", step.mfu_ratio()},
                          {"memory_peak_bytes", step.memory_peak_bytes()},
                          {"memory_reserved_bytes", step.memory_reserved_bytes()},
                          {"memory_device_used_bytes", step.memory_device_used_bytes()},
                          {"lr", step.lr()},
                          {"grad_norm", step.grad_norm()},
                          {"unix_millis", step.unix_millis()}};
  // Only on the steps that ran validation (data.eval_every).
  if (step.has_eval_loss()) event["eval_loss"] = step.eval_loss();
  return event;
}

std::string ActorName(const std::string& principal) {
  return principal.empty() ? "anonymous" : principal;
}

nlohmann::json StateEventToJson(const v1::StateChange& change) {
  return {{"type", "state"},
          {"job_id", change.job_id()},
          {"state", StateName(change.state())},
          {"reason", change.reason()},
          {"attempt", change.attempt()},
          {"unix_millis", change.unix_millis()},
          {"actor", change.actor()}};
}

nlohmann::json WorkerToJson(const v1::Worker& worker) {
  return {{"id", worker.id()},
          {"hostname", worker.hostname()},
          {"address", worker.address()},
          {"device_kind", worker.device_kind()},
          {"gpu_index", worker.gpu_index()},
          {"gpu_name", worker.gpu_name()},
          {"gpu_uuid", worker.gpu_uuid()},
          {"gpu_compute_capability", worker.gpu_compute_capability()},
          {"memory_bytes", worker.memory_bytes()},
          {"state", WorkerStateName(worker.state())},
          {"job_id", worker.job_id()},
          {"rank", worker.rank()},
          {"last_heartbeat_unix_millis", worker.last_heartbeat_unix_millis()}};
}

nlohmann::json LogLineToJson(const v1::LogLine& line) {
  return {{"job_id", line.job_id()},           {"attempt", line.attempt()}, {"rank", line.rank()},
          {"unix_millis", line.unix_millis()}, {"level", line.level()},     {"text", line.text()}};
}

std::string FormatTable(const std::vector<std::string>& headers,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths(headers.size());
  for (size_t i = 0; i < headers.size(); ++i) widths[i] = headers[i].size();
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  std::ostringstream out;
  auto print_row = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < widths.size(); ++i) {
      const std::string cell = i < cells.size() ? cells[i] : "";
      out << cell;
      if (i + 1 < widths.size()) out << std::string(widths[i] - cell.size() + 2, ' ');
    }
    out << "\n";
  };
  print_row(headers);
  for (const auto& row : rows) print_row(row);
  return out.str();
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const int64_t total = static_cast<int64_t>(std::llround(seconds));
  char buffer[32];
  if (total < 60) {
    std::snprintf(buffer, sizeof(buffer), "%llds", static_cast<long long>(total));
  } else if (total < 3600) {
    std::snprintf(buffer, sizeof(buffer), "%lldm%02llds", static_cast<long long>(total / 60),
                  static_cast<long long>(total % 60));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%lldh%02lldm", static_cast<long long>(total / 3600),
                  static_cast<long long>(total % 3600 / 60));
  }
  return buffer;
}

std::string FormatRate(double per_second) {
  char buffer[32];
  if (per_second >= 1e6) {
    std::snprintf(buffer, sizeof(buffer), "%.1fM", per_second / 1e6);
  } else if (per_second >= 1e4) {
    std::snprintf(buffer, sizeof(buffer), "%.1fk", per_second / 1e3);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.0f", per_second);
  }
  return buffer;
}

std::string FormatBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char buffer[32];
  if (unit == 0) {
    std::snprintf(buffer, sizeof(buffer), "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.1f %s", value, units[unit]);
  }
  return buffer;
}

std::string FormatLoss(double loss) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.4f", loss);
  return buffer;
}

std::string FormatTime(int64_t unix_millis) {
  if (unix_millis <= 0) return "-";
  const std::time_t seconds = static_cast<std::time_t>(unix_millis / 1000);
  std::tm local{};
  localtime_r(&seconds, &local);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%d %H:%M:%S", &local);
  return buffer;
}

std::string FormatAge(int64_t unix_millis) {
  if (unix_millis <= 0) return "-";
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  return FormatDuration(std::max<int64_t>(0, now - unix_millis) / 1000.0) + " ago";
}

namespace {

// The offset of the first byte that breaks UTF-8 (overlong forms, surrogates and code points
// past U+10FFFF included, as protobuf checks), or npos when `text` is valid.
size_t FirstInvalidUtf8(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      ++i;
      continue;
    }
    int length = 0;
    uint32_t low = 0;
    uint32_t code = 0;
    if ((byte & 0xe0) == 0xc0) {
      length = 2, low = 0x80, code = byte & 0x1f;
    } else if ((byte & 0xf0) == 0xe0) {
      length = 3, low = 0x800, code = byte & 0x0f;
    } else if ((byte & 0xf8) == 0xf0) {
      length = 4, low = 0x10000, code = byte & 0x07;
    } else {
      return i;
    }
    if (i + length > text.size()) return i;
    for (int k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return i;
      code = (code << 6) | (next & 0x3f);
    }
    if (code < low || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return i;
    i += length;
  }
  return std::string::npos;
}

void CheckUtf8(const std::string& field, const std::string& text, FieldErrors& errors) {
  const size_t bad = FirstInvalidUtf8(text);
  if (bad == std::string::npos) return;
  char byte[8];
  std::snprintf(byte, sizeof(byte), "0x%02x", static_cast<unsigned char>(text[bad]));
  errors.Fail(field, "is not UTF-8 text (byte " + std::string(byte) + " at offset " +
                         std::to_string(bad) + "); every string of a spec must be UTF-8");
}

void ValidateUtf8Strings(const google::protobuf::Message& message, const std::string& prefix,
                         FieldErrors& errors) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string name = prefix.empty() ? field->name() : prefix + "." + field->name();
    const bool is_string = field->type() == FieldDescriptor::TYPE_STRING;
    const bool is_message = field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (!is_string && !is_message) continue;
    if (!field->is_repeated()) {
      if (is_string) CheckUtf8(name, reflection->GetString(message, field), errors);
      if (is_message) ValidateUtf8Strings(reflection->GetMessage(message, field), name, errors);
      continue;
    }
    for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
      const std::string element = name + "[" + std::to_string(i) + "]";
      if (is_string) CheckUtf8(element, reflection->GetRepeatedString(message, field, i), errors);
      if (is_message) {
        ValidateUtf8Strings(reflection->GetRepeatedMessage(message, field, i), element, errors);
      }
    }
  }
}

}  // namespace

void ValidateUtf8Strings(const google::protobuf::Message& message, FieldErrors& errors) {
  ValidateUtf8Strings(message, "", errors);
}

}  // namespace fsdpd::client
