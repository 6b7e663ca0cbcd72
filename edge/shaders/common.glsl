// Shared declarations of the edge shaders. Weights ("W" buffers) are float16_t when the
// shader is compiled with -DWEIGHTS_F16 (the device has shaderFloat16 and
// storageBuffer16BitAccess) and float otherwise; activations are fp32 in memory except the
// matmul's x, which -DOUT_F16 producers (rmsnorm.comp, elementwise.comp) write and -DX_F16
// matmuls read as float16_t (Backend::MatmulInput, edge/backend.h). Every sum accumulates in
// fp32.
#if defined(WEIGHTS_F16) || defined(OUT_F16) || defined(X_F16)
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#endif
#ifdef WEIGHTS_F16
#define WTYPE float16_t
#else
#define WTYPE float
#endif
// The type a -DOUT_F16 producer stores: float16_t(value) of the fp32 value, rounded as
// to_half.comp rounds it.
#ifdef OUT_F16
#define OTYPE float16_t
#else
#define OTYPE float
#endif
