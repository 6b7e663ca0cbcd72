// The spec's path fields (proto/spec/spec_path_fields.h): read from the file_path option of
// proto/fsdpd/v1/spec.proto, and used by fsdpctl, the validator and the worker alike.
#include "proto/spec/spec_path_fields.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "proto/spec/job_spec.h"
#include "proto/spec/spec_validate.h"

namespace fsdpd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Names() {
  std::vector<std::string> names;
  for (const SpecPathField& field : SpecPathFields()) names.push_back(field.name());
  return names;
}

// The list the option gives. A new path field is marked in spec.proto and appears here; the
// Python client reads the same option (tests/python/python_client_test.py checks its list).
TEST(SpecPathFields, AreTheFieldsMarkedInSpecProto) {
  EXPECT_THAT(Names(), ElementsAre("data.path", "data.eval_path", "checkpoint.init_from"));
}

TEST(SpecPathFields, GetSetAndPresenceFollowTheProto) {
  v1::JobSpec spec;
  for (const SpecPathField& field : SpecPathFields()) {
    EXPECT_FALSE(field.IsSet(spec)) << field.name();
    EXPECT_EQ(field.Get(spec), "") << field.name();
  }
  const SpecPathField& data = SpecPathFields()[0];
  const SpecPathField& init = SpecPathFields()[2];  // [1] is data.eval_path
  data.Set(&spec, "/srv/tokens.bin");
  EXPECT_EQ(spec.data().path(), "/srv/tokens.bin");
  EXPECT_TRUE(data.IsSet(spec));
  EXPECT_FALSE(init.IsSet(spec));  // setting one field leaves the others unset
  spec.mutable_checkpoint()->set_init_from("");
  EXPECT_TRUE(init.IsSet(spec));  // an explicit "" is set (proto3 presence)
  EXPECT_EQ(init.Get(spec), "");
  spec.mutable_checkpoint()->set_init_from("/srv/init.safetensors");
  EXPECT_EQ(init.Get(spec), "/srv/init.safetensors");
}

// The validator checks the syntax and the length of every field of the list, each by its name.
TEST(SpecPathFields, EachIsCheckedByTheValidator) {
  for (const SpecPathField& field : SpecPathFields()) {
    v1::JobSpec spec = DefaultJobSpec();
    spec.set_name("paths");
    field.Set(&spec, "relative/file");
    EXPECT_THAT(FormatFieldErrors(ValidateJobSpec(spec)),
                HasSubstr(field.name() + ": must be an absolute path"));
    field.Set(&spec, "/" + std::string(SpecLimits::kMaxPathLength, 'p'));
    FieldErrors lengths;
    ValidateStringLengths(spec, lengths);
    EXPECT_THAT(FormatFieldErrors(lengths.Take()),
                HasSubstr(field.name() + ": must be at most 4096 characters"));
  }
}

}  // namespace
}  // namespace fsdpd
