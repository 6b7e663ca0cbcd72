// The path fields of a job spec: the string fields marked [(fsdpd.v1.file_path) = true] in
// proto/fsdpd/v1/spec.proto, found through the message descriptors. That option is the one list:
// fsdpctl resolves each relative path against the spec file's folder (client/submit_command.cc),
// the validator bounds and checks each one's syntax (proto/spec/spec_paths.cc), and the worker
// confines each one to its allowed roots (worker/data/path_policy.h). The Python client reads the
// same option from its generated module (python/fsdpd/client.py).
#pragma once

#include <string>
#include <vector>

#include "fsdpd/v1/spec.pb.h"

namespace fsdpd {

class SpecPathField {
 public:
  // `fields` leads from JobSpec to the path field, e.g. {JobSpec.data, DataSpec.path}.
  explicit SpecPathField(std::vector<const google::protobuf::FieldDescriptor*> fields);

  // The dotted name errors use, e.g. "data.path".
  const std::string& name() const { return name_; }
  // Whether the spec sets the field (proto3 presence), even to "".
  bool IsSet(const v1::JobSpec& spec) const;
  // The field's value; "" when unset.
  std::string Get(const v1::JobSpec& spec) const;
  void Set(v1::JobSpec* spec, const std::string& value) const;

 private:
  std::vector<const google::protobuf::FieldDescriptor*> fields_;
  std::string name_;
};

// Every path field of JobSpec, in the order of spec.proto.
const std::vector<SpecPathField>& SpecPathFields();

}  // namespace fsdpd
