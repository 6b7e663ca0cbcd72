#include "proto/spec/spec_path_fields.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"

namespace fsdpd {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Depth first, in field order. A marked field that is not a singular string is a mistake in
// spec.proto, caught the first time the list is built.
void Collect(const Descriptor* message, std::vector<const FieldDescriptor*>& chain,
             std::vector<SpecPathField>& found) {
  for (int i = 0; i < message->field_count(); ++i) {
    const FieldDescriptor* field = message->field(i);
    chain.push_back(field);
    if (field->options().GetExtension(v1::file_path)) {
      if (field->type() != FieldDescriptor::TYPE_STRING || field->is_repeated()) {
        std::fprintf(stderr, "fsdpd: %s is marked file_path but is not a singular string\n",
                     field->full_name().c_str());
        std::abort();
      }
      found.emplace_back(chain);
    } else if (field->type() == FieldDescriptor::TYPE_MESSAGE && !field->is_repeated()) {
      Collect(field->message_type(), chain, found);
    }
    chain.pop_back();
  }
}

}  // namespace

SpecPathField::SpecPathField(std::vector<const FieldDescriptor*> fields)
    : fields_(std::move(fields)) {
  std::vector<std::string> names;
  for (const FieldDescriptor* field : fields_) names.push_back(field->name());
  name_ = absl::StrJoin(names, ".");
}

bool SpecPathField::IsSet(const v1::JobSpec& spec) const {
  const Message* message = &spec;
  for (const FieldDescriptor* field : fields_) {
    if (!message->GetReflection()->HasField(*message, field)) return false;
    if (field != fields_.back()) message = &message->GetReflection()->GetMessage(*message, field);
  }
  return true;
}

std::string SpecPathField::Get(const v1::JobSpec& spec) const {
  const Message* message = &spec;
  for (size_t i = 0; i + 1 < fields_.size(); ++i) {
    message = &message->GetReflection()->GetMessage(*message, fields_[i]);
  }
  return message->GetReflection()->GetString(*message, fields_.back());
}

void SpecPathField::Set(v1::JobSpec* spec, const std::string& value) const {
  Message* message = spec;
  for (size_t i = 0; i + 1 < fields_.size(); ++i) {
    message = message->GetReflection()->MutableMessage(message, fields_[i]);
  }
  message->GetReflection()->SetString(message, fields_.back(), value);
}

const std::vector<SpecPathField>& SpecPathFields() {
  static const std::vector<SpecPathField>* const fields = [] {
    auto* found = new std::vector<SpecPathField>();
    std::vector<const FieldDescriptor*> chain;
    Collect(v1::JobSpec::descriptor(), chain, *found);
    return found;
  }();
  return *fields;
}

}  // namespace fsdpd
