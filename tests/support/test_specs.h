// Job specs that tests build as protos, written once for every test binary.
#pragma once

#include "fsdpd/v1/spec.pb.h"

namespace fsdpd::testing {

// The smallest valid CPU job: the defaults of proto/spec/job_spec.h with a 2-layer, 64-wide
// MiniLLM, sequences of 32 tokens, batches of 2, one fp32 rank. Named "tiny".
v1::JobSpec TinyJobSpec();

}  // namespace fsdpd::testing
