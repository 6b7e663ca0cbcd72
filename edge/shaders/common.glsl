// Shared declarations of the edge shaders. Weights ("W" buffers) are float16_t when the
// shader is compiled with -DWEIGHTS_F16 (the device has shaderFloat16 and
// storageBuffer16BitAccess) and float otherwise; activations are always fp32 in memory and
// every sum accumulates in fp32.
#ifdef WEIGHTS_F16
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#define WTYPE float16_t
#else
#define WTYPE float
#endif
