#include "client/spec_overrides.h"

#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "proto/spec/spec_path_fields.h"

namespace fsdpd::client {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::string FieldNames(const Descriptor* descriptor) {
  std::vector<std::string> names;
  for (int i = 0; i < descriptor->field_count(); ++i) names.push_back(descriptor->field(i)->name());
  return absl::StrJoin(names, ", ");
}

std::string TypeName(const FieldDescriptor* field) {
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
      return "an integer";
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return "a non-negative integer";
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return "a number";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true or false";
    case FieldDescriptor::CPPTYPE_ENUM: {
      std::vector<std::string> names;
      const google::protobuf::EnumDescriptor* type = field->enum_type();
      for (int i = 0; i < type->value_count(); ++i) names.push_back(type->value(i)->name());
      return absl::StrCat("one of ", absl::StrJoin(names, ", "));
    }
    default:
      return "a string";
  }
}

// Sets the scalar `field` of `message` from `text`; false when `text` is not of its type.
bool SetScalar(Message* message, const FieldDescriptor* field, const std::string& text) {
  const Reflection* reflection = message->GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t value;
      if (!absl::SimpleAtoi(text, &value)) return false;
      reflection->SetInt32(message, field, value);
      return true;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t value;
      if (!absl::SimpleAtoi(text, &value)) return false;
      reflection->SetInt64(message, field, value);
      return true;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t value;
      if (!absl::SimpleAtoi(text, &value)) return false;
      reflection->SetUInt32(message, field, value);
      return true;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t value;
      if (!absl::SimpleAtoi(text, &value)) return false;
      reflection->SetUInt64(message, field, value);
      return true;
    }
    case FieldDescriptor::CPPTYPE_FLOAT: {
      float value;
      if (!absl::SimpleAtof(text, &value)) return false;
      reflection->SetFloat(message, field, value);
      return true;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double value;
      if (!absl::SimpleAtod(text, &value)) return false;
      reflection->SetDouble(message, field, value);
      return true;
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      const std::string lower = absl::AsciiStrToLower(text);
      if (lower != "true" && lower != "false") return false;
      reflection->SetBool(message, field, lower == "true");
      return true;
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      const google::protobuf::EnumValueDescriptor* value =
          field->enum_type()->FindValueByName(text);
      if (value == nullptr) return false;
      reflection->SetEnum(message, field, value);
      return true;
    }
    case FieldDescriptor::CPPTYPE_STRING:
      reflection->SetString(message, field, text);
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::Status ApplySpecOverride(const std::string& assignment, v1::JobSpec* spec) {
  const std::string shown = absl::StrCat("--set ", assignment);
  const size_t equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(shown, ": write path=value, e.g. --set train.lr=1e-4"));
  }
  const std::string path = assignment.substr(0, equals);
  const std::string value = assignment.substr(equals + 1);
  const std::vector<std::string> segments = absl::StrSplit(path, '.');
  Message* message = spec;
  std::string walked;  // the sections passed so far, for messages
  for (size_t i = 0; i < segments.size(); ++i) {
    const Descriptor* descriptor = message->GetDescriptor();
    const FieldDescriptor* field = descriptor->FindFieldByName(segments[i]);
    if (field == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(shown, ": the spec has no field \"", segments[i], "\"",
                       walked.empty() ? "" : absl::StrCat(" in ", walked), " (",
                       walked.empty() ? "" : "its ", "fields: ", FieldNames(descriptor), ")"));
    }
    walked = walked.empty() ? field->name() : absl::StrCat(walked, ".", field->name());
    const bool last = i + 1 == segments.size();
    if (field->is_repeated()) {
      return absl::InvalidArgumentError(absl::StrCat(
          shown, ": ", walked, " is a list; --set sets single values (edit the spec instead)"));
    }
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (last) {
        return absl::InvalidArgumentError(absl::StrCat(shown, ": ", walked,
                                                       " is a section; name one of its fields (",
                                                       FieldNames(field->message_type()), ")"));
      }
      message = message->GetReflection()->MutableMessage(message, field);
      continue;
    }
    if (!last) {
      return absl::InvalidArgumentError(
          absl::StrCat(shown, ": ", walked, " is a single value, not a section"));
    }
    if (!SetScalar(message, field, value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(shown, ": ", walked, " takes ", TypeName(field), ", got \"", value, "\""));
    }
  }
  // A relative path is the caller's: made absolute here, as submit does against the spec file.
  for (const SpecPathField& field : SpecPathFields()) {
    if (field.name() != walked || value.empty()) continue;
    if (std::filesystem::path(value).is_absolute()) continue;
    std::error_code error;
    const std::filesystem::path absolute = std::filesystem::absolute(value, error);
    if (!error) field.Set(spec, absolute.lexically_normal().string());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::string>> ParseKeyValues(
    const std::vector<std::string>& arguments, const std::string& flag) {
  std::map<std::string, std::string> pairs;
  for (const std::string& argument : arguments) {
    const size_t equals = argument.find('=');
    if (equals == std::string::npos || equals == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " ", argument, ": write key=value, e.g. ", flag, " team=nlp"));
    }
    pairs[argument.substr(0, equals)] = argument.substr(equals + 1);
  }
  return pairs;
}

}  // namespace fsdpd::client
