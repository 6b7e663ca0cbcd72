// The Ops of the CPU backend: its dtype checks (f32), then the fp32 reference kernels of
// kernels/cpu. Work runs inline on the calling thread, so the stream argument only orders it.
#pragma once

#include "worker/backend/ops.h"

namespace fsdpd {

class CpuOps : public Ops {
 public:
  FSDPD_OPS_OVERRIDES
};

}  // namespace fsdpd
