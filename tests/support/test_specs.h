// Job specs the tests share: written once, so a change of the spec's rules changes them all.
#pragma once

#include "fsdpd/v1/spec.pb.h"
#include "proto/spec/job_spec.h"

namespace fsdpd::testing {

// A valid one-rank CPU job that trains in milliseconds: the seed's defaults with a small model.
inline v1::JobSpec TinyJobSpec() {
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
