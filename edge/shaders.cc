#include "edge/shaders.h"

namespace fsdpd::edge {

const std::vector<CoopMatmulVariant>& CoopMatmulVariants() {
  static const auto* variants = [] {
    auto* list = new std::vector<CoopMatmulVariant>;
    for (int i = 0; i < kShaderCount; ++i) {
      const auto shader = static_cast<Shader>(i);
      const ShaderVariant& variant = VariantOf(shader);
      if (variant.matmul != nullptr && variant.built()) {
        list->push_back(
            {shader, variant.matmul, variant.matrices == Matrices::kWorkgroup, variant.half_input});
      }
    }
    return list;
  }();
  return *variants;
}

std::vector<AttentionVariant> AttentionCm2Shaders() {
  std::vector<AttentionVariant> built;
  for (int i = 0; i < kShaderCount; ++i) {
    const auto shader = static_cast<Shader>(i);
    const ShaderVariant& variant = VariantOf(shader);
    if (variant.attention != nullptr && variant.built())
      built.push_back({shader, variant.attention});
  }
  return built;
}

}  // namespace fsdpd::edge
