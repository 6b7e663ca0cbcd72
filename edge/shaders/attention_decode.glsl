// Shared by attention_decode.comp and attention_decode_combine.comp: the keys a slice of the
// first pass takes (edge/vulkan_backend.cc's kDecodeAttentionSplit), the widest head.
#define SPLIT 64
#define MAX_HEAD_DIM 128
#define FLT_MAX 3.402823466e38
