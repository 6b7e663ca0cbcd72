#include "tests/support/test_specs.h"

#include "proto/spec/job_spec.h"

namespace fsdpd::testing {

v1::JobSpec TinyJobSpec() {
  v1::JobSpec spec = DefaultJobSpec();
  spec.set_name("tiny");
  spec.mutable_model()->set_vocab(256);
  spec.mutable_model()->set_dim(64);
  spec.mutable_model()->set_layers(2);
  spec.mutable_model()->set_heads(4);
  spec.mutable_data()->set_seq_len(32);
  spec.mutable_train()->set_batch_size(2);
  spec.mutable_parallel()->set_world_size(1);
  spec.mutable_parallel()->set_device("cpu");
  spec.mutable_parallel()->set_param_dtype("fp32");
  return spec;
}

}  // namespace fsdpd::testing
