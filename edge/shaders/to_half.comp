#version 450
// out = fp16(a), rounded to nearest even: the fp16 input of the workgroup-scope matmul's X_F16
// blocks (matmul_cm2.comp). Four elements a thread through 16-byte loads; the tail of count % 4
// by the first threads.
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { vec4 a4[]; };
layout(std430, binding = 0) readonly buffer A1 { float a[]; };
layout(std430, binding = 1) writeonly buffer Out { f16vec4 result4[]; };
layout(std430, binding = 1) writeonly buffer Out1 { float16_t result[]; };
layout(push_constant) uniform Push { uint count; } p;
void main() {
  const uint quads = p.count / 4;
  for (uint i = gl_GlobalInvocationID.x; i < quads; i += gl_NumWorkGroups.x * 256) {
    result4[i] = f16vec4(a4[i]);
  }
  const uint tail = quads * 4 + gl_GlobalInvocationID.x;
  if (tail < p.count) result[tail] = float16_t(a[tail]);
}
