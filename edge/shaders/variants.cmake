# Every compute shader variant of the edge runtime, one edge_shader() call each. The build
# (edge/shader_table.cmake) compiles each to SPIR-V and writes the Shader enum (edge/shaders.h)
# and its table from this list alone: a new variant is one call here.
#
#   edge_shader(<kName> <source> "<name>" LAYOUT <buffers> <push bytes> [DEFINES -D…]
#               [MATRICES subgroup|workgroup] [MATMUL <block name>] [ATTENTION <name>])
#
# kName: its enumerator, Shader::kName. name: for messages and op times.
# LAYOUT: the storage buffers bound 0, 1, … and the bytes of push constants the host passes.
# DEFINES: to the compiler. The output block that sizes the dispatch grid is read from them,
#   BM × BN for a matmul and BR × HD (queries a workgroup, largest head_dim) for
#   attention_cm2.comp, {1, 1} for the rest; so is the K slice, BK. -DX_F16: x is read as fp16
#   (the host casts an fp32 x with kToHalf first). Each source's header says what the others do.
# MATRICES: the cooperative matrices it needs: subgroup (VK_NV_cooperative_matrix) or workgroup
#   (VK_NV_cooperative_matrix2; compiled by slang's glslang and left out of a build without it).
# MATMUL: a cooperative-matrix matmul block the tuner chooses among (edge/matmul_tuner.h), by the
#   name VulkanOptions::coop_block takes; edge_bench --coop-blocks times each. The first listed
#   is the default when the tuner is not used.
# ATTENTION: a workgroup-scope attention shader timed against attention_coop.comp per shape, by
#   the name VulkanOptions::attention takes.

edge_shader(kEmbedding embedding.comp "embedding" LAYOUT 3 8)
edge_shader(kEmbeddingF16 embedding.comp "embedding (fp16)" LAYOUT 3 8 DEFINES -DWEIGHTS_F16)
# -DOUT_F16: writes a matmul's fp16 x (Backend::MatmulInput).
edge_shader(kElementwise elementwise.comp "elementwise" LAYOUT 3 8)
edge_shader(kElementwiseHalfOut elementwise.comp "elementwise (fp16 out)" LAYOUT 3 8
            DEFINES -DOUT_F16)
edge_shader(kToHalf to_half.comp "to_half" LAYOUT 2 4)
edge_shader(kRmsNorm rmsnorm.comp "rmsnorm" LAYOUT 3 12)
edge_shader(kRmsNormF16 rmsnorm.comp "rmsnorm (fp16)" LAYOUT 3 12 DEFINES -DWEIGHTS_F16)
edge_shader(kRmsNormF16HalfOut rmsnorm.comp "rmsnorm (fp16, fp16 out)" LAYOUT 3 12
            DEFINES -DWEIGHTS_F16 -DOUT_F16)
edge_shader(kTokenNll token_nll.comp "token_nll" LAYOUT 3 8)
edge_shader(kArgmax argmax.comp "argmax" LAYOUT 3 8)
# Attention's push constants are edge/vulkan_backend.cc's AttentionPush (28 bytes); the shaders on
# matrices read its first 24. attention_decode.comp takes a few new positions against a cache,
# a slice of keys a workgroup; attention_decode_combine.comp adds its slices.
edge_shader(kAttention attention.comp "attention" LAYOUT 2 28)
edge_shader(kAttentionCoop attention_coop.comp "attention (cooperative matrix)" LAYOUT 2 24
            MATRICES subgroup)
edge_shader(kAttentionDecode attention_decode.comp "attention (decoding, slices apart)" LAYOUT 2 28)
edge_shader(kAttentionDecodeInPlace attention_decode.comp "attention (decoding)" LAYOUT 4 28
            DEFINES -DCOMBINE_IN_PLACE)
edge_shader(kAttentionDecodeCombine attention_decode_combine.comp
            "attention (decoding, slices added)" LAYOUT 2 28)
# The tiled matmul; matmul_f16_h reads x as fp16.
edge_shader(kMatmul matmul.comp "matmul" LAYOUT 4 16 DEFINES -DBM=128 -DBN=128)
edge_shader(kMatmulF16 matmul.comp "matmul (fp16)" LAYOUT 4 16
            DEFINES -DWEIGHTS_F16 -DBM=128 -DBN=128)
edge_shader(kMatmulF16HalfX matmul.comp "matmul (fp16, fp16 x)" LAYOUT 4 16
            DEFINES -DWEIGHTS_F16 -DX_F16 -DBM=128 -DBN=128)
# Linear for a few rows (decoding's one new position), narrow and wide layouts
# (VulkanOptions::matvec_layout); COLUMNS is edge/vulkan_backend.cc's kMatvecColumns.
edge_shader(kMatvec matvec.comp "matvec" LAYOUT 5 24)
edge_shader(kMatvecF16 matvec.comp "matvec (fp16)" LAYOUT 5 24 DEFINES -DWEIGHTS_F16)
edge_shader(kMatvecF16HalfX matvec.comp "matvec (fp16, fp16 x)" LAYOUT 5 24
            DEFINES -DWEIGHTS_F16 -DX_F16)
edge_shader(kMatvecWide matvec.comp "matvec, wide" LAYOUT 5 24
            DEFINES -DCOLUMNS=4 -DLANES=32 -DVECTOR_READS)
edge_shader(kMatvecF16Wide matvec.comp "matvec (fp16), wide" LAYOUT 5 24
            DEFINES -DWEIGHTS_F16 -DCOLUMNS=4 -DLANES=32 -DVECTOR_READS)
edge_shader(kMatvecF16HalfXWide matvec.comp "matvec (fp16, fp16 x), wide" LAYOUT 5 24
            DEFINES -DWEIGHTS_F16 -DX_F16 -DCOLUMNS=4 -DLANES=32 -DVECTOR_READS)
# The wide layout with 2 or 4 output columns a subgroup, one x read serving them all
# (VulkanOptions::MatvecLayout::kWide2, kWide4).
edge_shader(kMatvecWide2 matvec.comp "matvec, wide, 2 columns a subgroup" LAYOUT 5 24
            DEFINES -DCOLUMNS=4 -DLANES=32 -DVECTOR_READS -DSUBGROUP_COLUMNS=2)
edge_shader(kMatvecF16Wide2 matvec.comp "matvec (fp16), wide, 2 columns a subgroup" LAYOUT 5 24
            DEFINES -DWEIGHTS_F16 -DCOLUMNS=4 -DLANES=32 -DVECTOR_READS -DSUBGROUP_COLUMNS=2)
edge_shader(kMatvecF16HalfXWide2 matvec.comp "matvec (fp16, fp16 x), wide, 2 columns a subgroup"
            LAYOUT 5 24
            DEFINES -DWEIGHTS_F16 -DX_F16 -DCOLUMNS=4 -DLANES=32 -DVECTOR_READS -DSUBGROUP_COLUMNS=2)
edge_shader(kMatvecWide4 matvec.comp "matvec, wide, 4 columns a subgroup" LAYOUT 5 24
            DEFINES -DCOLUMNS=4 -DLANES=32 -DVECTOR_READS -DSUBGROUP_COLUMNS=4)
edge_shader(kMatvecF16Wide4 matvec.comp "matvec (fp16), wide, 4 columns a subgroup" LAYOUT 5 24
            DEFINES -DWEIGHTS_F16 -DCOLUMNS=4 -DLANES=32 -DVECTOR_READS -DSUBGROUP_COLUMNS=4)
edge_shader(kMatvecF16HalfXWide4 matvec.comp "matvec (fp16, fp16 x), wide, 4 columns a subgroup"
            LAYOUT 5 24
            DEFINES -DWEIGHTS_F16 -DX_F16 -DCOLUMNS=4 -DLANES=32 -DVECTOR_READS -DSUBGROUP_COLUMNS=4)

# The cooperative-matrix matmul in several blocks: rows × columns (BM × BN) by WARPS_M × WARPS_N
# subgroups, K slice BK; -DGROUP_M=8 launches workgroups in groups of 8 block rows, for L2 reuse.
edge_shader(kMatmulCoop matmul_coop.comp "matmul (cooperative matrix)" LAYOUT 4 16
            MATRICES subgroup MATMUL 128x128k32
            DEFINES -DWEIGHTS_F16 -DBM=128 -DBN=128 -DWARPS_M=2 -DWARPS_N=4 -DBK=32)
edge_shader(kMatmulCoopK64 matmul_coop.comp "matmul (cooperative matrix, K slice 64)"
            LAYOUT 4 16 MATRICES subgroup MATMUL 128x128k64
            DEFINES -DWEIGHTS_F16 -DBM=128 -DBN=128 -DWARPS_M=2 -DWARPS_N=4 -DBK=64)
edge_shader(kMatmulCoop256x128 matmul_coop.comp "matmul (cooperative matrix, 256x128 block)"
            LAYOUT 4 16 MATRICES subgroup MATMUL 256x128k32
            DEFINES -DWEIGHTS_F16 -DBM=256 -DBN=128 -DWARPS_M=4 -DWARPS_N=2 -DBK=32)
edge_shader(kMatmulCoop128x256 matmul_coop.comp "matmul (cooperative matrix, 128x256 block)"
            LAYOUT 4 16 MATRICES subgroup MATMUL 128x256k32
            DEFINES -DWEIGHTS_F16 -DBM=128 -DBN=256 -DWARPS_M=2 -DWARPS_N=4 -DBK=32)
edge_shader(kMatmulCoopW4 matmul_coop.comp "matmul (cooperative matrix, four subgroups)"
            LAYOUT 4 16 MATRICES subgroup MATMUL 128x128k32w4
            DEFINES -DWEIGHTS_F16 -DBM=128 -DBN=128 -DWARPS_M=2 -DWARPS_N=2 -DBK=32)
edge_shader(kMatmulCoopG8 matmul_coop.comp "matmul (cooperative matrix, grouped order)"
            LAYOUT 4 16 MATRICES subgroup MATMUL 128x128k32g8
            DEFINES -DWEIGHTS_F16 -DBM=128 -DBN=128 -DWARPS_M=2 -DWARPS_N=4 -DBK=32 -DGROUP_M=8)
edge_shader(kMatmulCoop256x128G8 matmul_coop.comp
            "matmul (cooperative matrix, 256x128 block, grouped order)"
            LAYOUT 4 16 MATRICES subgroup MATMUL 256x128k32g8
            DEFINES -DWEIGHTS_F16 -DBM=256 -DBN=128 -DWARPS_M=4 -DWARPS_N=2 -DBK=32 -DGROUP_M=8)
edge_shader(kMatmulCoop128x256G8 matmul_coop.comp
            "matmul (cooperative matrix, 128x256 block, grouped order)"
            LAYOUT 4 16 MATRICES subgroup MATMUL 128x256k32g8
            DEFINES -DWEIGHTS_F16 -DBM=128 -DBN=256 -DWARPS_M=2 -DWARPS_N=4 -DBK=32 -DGROUP_M=8)

# attention_cm2.comp (workgroup scope): BR queries a workgroup, BC keys a step, head_dim up to HD.
edge_shader(kAttentionCm2 attention_cm2.comp "attention (workgroup-scope cooperative matrix)"
            LAYOUT 2 24 MATRICES workgroup ATTENTION cm2
            DEFINES -DBR=64 -DBC=64 -DHD=128 -DTHREADS=128)
edge_shader(kAttentionCm2Br128 attention_cm2.comp
            "attention (workgroup-scope cooperative matrix, 128 queries)"
            LAYOUT 2 24 MATRICES workgroup ATTENTION cm2br128
            DEFINES -DBR=128 -DBC=64 -DHD=128 -DTHREADS=256)
edge_shader(kAttentionCm2Hd64 attention_cm2.comp
            "attention (workgroup-scope cooperative matrix, head_dim ≤ 64)"
            LAYOUT 2 24 MATRICES workgroup ATTENTION cm2hd64
            DEFINES -DBR=64 -DBC=64 -DHD=64 -DTHREADS=128)

# matmul_cm2.comp (workgroup scope) in several blocks: BM × BN, K slice BK. -DX_F16: x arrives as
# fp16 (cast by to_half.comp, or written so: Backend::MatmulInput); -DUNROLL: K slices a step of
# the fast path, 4 unless given; -DSTAGED: the fast path staged through shared memory by the
# shader (matmul_cm2.comp's header).
edge_shader(kMatmulCm2 matmul_cm2.comp "matmul (workgroup-scope cooperative matrix)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 128x128k32cm2 DEFINES -DBM=128 -DBN=128 -DBK=32)
edge_shader(kMatmulCm2128x256 matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, 128x256 block)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 128x256k32cm2 DEFINES -DBM=128 -DBN=256 -DBK=32)
edge_shader(kMatmulCm2K64 matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, K slice 64)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 128x128k64cm2 DEFINES -DBM=128 -DBN=128 -DBK=64)
edge_shader(kMatmulCm2128x256K64 matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, 128x256 block, K slice 64)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 128x256k64cm2 DEFINES -DBM=128 -DBN=256 -DBK=64)
edge_shader(kMatmulCm2256x128 matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, 256x128 block)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 256x128k32cm2 DEFINES -DBM=256 -DBN=128 -DBK=32)
edge_shader(kMatmulCm2H matmul_cm2.comp "matmul (workgroup-scope cooperative matrix, fp16 x)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 128x128k32cm2h
            DEFINES -DBM=128 -DBN=128 -DBK=32 -DX_F16)
edge_shader(kMatmulCm2128x256H matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, 128x256 block, fp16 x)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 128x256k32cm2h
            DEFINES -DBM=128 -DBN=256 -DBK=32 -DX_F16)
edge_shader(kMatmulCm2256x128H matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, 256x128 block, fp16 x)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 256x128k32cm2h
            DEFINES -DBM=256 -DBN=128 -DBK=32 -DX_F16)
edge_shader(kMatmulCm2128x256K64H matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, 128x256 block, K slice 64, fp16 x)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 128x256k64cm2h
            DEFINES -DBM=128 -DBN=256 -DBK=64 -DX_F16)
edge_shader(kMatmulCm2256x128K64H matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, 256x128 block, K slice 64, fp16 x)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 256x128k64cm2h
            DEFINES -DBM=256 -DBN=128 -DBK=64 -DX_F16)
edge_shader(kMatmulCm2128x256K64HU2 matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, 128x256 block, K slice 64, fp16 x, 2 slices a step)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 128x256k64cm2h-u2
            DEFINES -DBM=128 -DBN=256 -DBK=64 -DX_F16 -DUNROLL=2)
edge_shader(kMatmulCm2128x256K64HU8 matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, 128x256 block, K slice 64, fp16 x, 8 slices a step)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 128x256k64cm2h-u8
            DEFINES -DBM=128 -DBN=256 -DBK=64 -DX_F16 -DUNROLL=8)
edge_shader(kMatmulCm2128x256HU8 matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, 128x256 block, fp16 x, 8 slices a step)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 128x256k32cm2h-u8
            DEFINES -DBM=128 -DBN=256 -DBK=32 -DX_F16 -DUNROLL=8)
edge_shader(kMatmulCm2128x256HS matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, 128x256 block, fp16 x, staged by the shader)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 128x256k32cm2h-s
            DEFINES -DBM=128 -DBN=256 -DBK=32 -DX_F16 -DSTAGED)
edge_shader(kMatmulCm2256x128HS matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, 256x128 block, fp16 x, staged by the shader)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 256x128k32cm2h-s
            DEFINES -DBM=256 -DBN=128 -DBK=32 -DX_F16 -DSTAGED)
edge_shader(kMatmulCm2128x128K64HS matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, 128x128 block, K slice 64, fp16 x, staged by the shader)"
            LAYOUT 4 16 MATRICES workgroup MATMUL 128x128k64cm2h-s
            DEFINES -DBM=128 -DBN=128 -DBK=64 -DX_F16 -DSTAGED)

# int8 weights (Backend::Int8Weight; the layout in edge/shaders/int8.glsl): decoding's matvec in
# each layout, the tiled matmul, and the cooperative-matrix matmuls that dequantize to fp16 as
# they stage (two subgroup-scope blocks, each reading fp32 x or (-DX_F16) an fp16 MatmulInput;
# three workgroup-scope blocks, staged by the shader, fp16 x). The cooperative ones carry no
# MATMUL name: they are VulkanPipelines::int8_matmuls, not fp16 blocks.
edge_shader(kMatvecInt8 matvec_int8.comp "matvec (int8)" LAYOUT 5 24)
edge_shader(kMatvecInt8HalfX matvec_int8.comp "matvec (int8, fp16 x)" LAYOUT 5 24
            DEFINES -DX_F16)
edge_shader(kMatvecInt8Wide matvec_int8.comp "matvec (int8), wide" LAYOUT 5 24
            DEFINES -DCOLUMNS=4 -DLANES=32 -DVECTOR_READS)
edge_shader(kMatvecInt8HalfXWide matvec_int8.comp "matvec (int8, fp16 x), wide" LAYOUT 5 24
            DEFINES -DX_F16 -DCOLUMNS=4 -DLANES=32 -DVECTOR_READS)
# The wide layout reading a word a lane (VulkanOptions::MatvecLayout::kWideWords).
edge_shader(kMatvecInt8Words matvec_int8.comp "matvec (int8), wide words" LAYOUT 5 24
            DEFINES -DCOLUMNS=4 -DLANES=32 -DWORD_READS)
edge_shader(kMatvecInt8HalfXWords matvec_int8.comp "matvec (int8, fp16 x), wide words"
            LAYOUT 5 24 DEFINES -DX_F16 -DCOLUMNS=4 -DLANES=32 -DWORD_READS)
# The wide layout with 2 or 4 output columns a subgroup, one x read serving them all
# (VulkanOptions::MatvecLayout::kWide2, kWide4).
edge_shader(kMatvecInt8Wide2 matvec_int8.comp "matvec (int8), wide, 2 columns a subgroup"
            LAYOUT 5 24 DEFINES -DCOLUMNS=4 -DLANES=32 -DVECTOR_READS -DSUBGROUP_COLUMNS=2)
edge_shader(kMatvecInt8HalfXWide2 matvec_int8.comp
            "matvec (int8, fp16 x), wide, 2 columns a subgroup"
            LAYOUT 5 24 DEFINES -DX_F16 -DCOLUMNS=4 -DLANES=32 -DVECTOR_READS -DSUBGROUP_COLUMNS=2)
edge_shader(kMatvecInt8Wide4 matvec_int8.comp "matvec (int8), wide, 4 columns a subgroup"
            LAYOUT 5 24 DEFINES -DCOLUMNS=4 -DLANES=32 -DVECTOR_READS -DSUBGROUP_COLUMNS=4)
edge_shader(kMatvecInt8HalfXWide4 matvec_int8.comp
            "matvec (int8, fp16 x), wide, 4 columns a subgroup"
            LAYOUT 5 24 DEFINES -DX_F16 -DCOLUMNS=4 -DLANES=32 -DVECTOR_READS -DSUBGROUP_COLUMNS=4)
edge_shader(kMatmulInt8 matmul.comp "matmul (int8)" LAYOUT 4 16
            DEFINES -DWEIGHTS_INT8 -DBM=128 -DBN=128)
edge_shader(kMatmulInt8HalfX matmul.comp "matmul (int8, fp16 x)" LAYOUT 4 16
            DEFINES -DWEIGHTS_INT8 -DX_F16 -DBM=128 -DBN=128)
edge_shader(kMatmulCoopInt8 matmul_coop.comp "matmul (cooperative matrix, int8)"
            LAYOUT 4 16 MATRICES subgroup
            DEFINES -DWEIGHTS_INT8 -DBM=128 -DBN=128 -DWARPS_M=2 -DWARPS_N=4 -DBK=32)
edge_shader(kMatmulCoopInt8HalfX matmul_coop.comp "matmul (cooperative matrix, int8, fp16 x)"
            LAYOUT 4 16 MATRICES subgroup
            DEFINES -DWEIGHTS_INT8 -DX_F16 -DBM=128 -DBN=128 -DWARPS_M=2 -DWARPS_N=4 -DBK=32)
edge_shader(kMatmulCoopInt8256x128 matmul_coop.comp
            "matmul (cooperative matrix, int8, 256x128 block)"
            LAYOUT 4 16 MATRICES subgroup
            DEFINES -DWEIGHTS_INT8 -DBM=256 -DBN=128 -DWARPS_M=4 -DWARPS_N=2 -DBK=32)
edge_shader(kMatmulCoopInt8256x128HalfX matmul_coop.comp
            "matmul (cooperative matrix, int8, 256x128 block, fp16 x)"
            LAYOUT 4 16 MATRICES subgroup
            DEFINES -DWEIGHTS_INT8 -DX_F16 -DBM=256 -DBN=128 -DWARPS_M=4 -DWARPS_N=2 -DBK=32)
edge_shader(kMatmulCm2Int8128x256HS matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, int8, 128x256 block, fp16 x, staged by the shader)"
            LAYOUT 4 16 MATRICES workgroup
            DEFINES -DWEIGHTS_INT8 -DBM=128 -DBN=256 -DBK=32 -DX_F16 -DSTAGED)
edge_shader(kMatmulCm2Int8256x128HS matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, int8, 256x128 block, fp16 x, staged by the shader)"
            LAYOUT 4 16 MATRICES workgroup
            DEFINES -DWEIGHTS_INT8 -DBM=256 -DBN=128 -DBK=32 -DX_F16 -DSTAGED)
edge_shader(kMatmulCm2Int8128x128K64HS matmul_cm2.comp
            "matmul (workgroup-scope cooperative matrix, int8, 128x128 block, K slice 64, fp16 x, staged by the shader)"
            LAYOUT 4 16 MATRICES workgroup
            DEFINES -DWEIGHTS_INT8 -DBM=128 -DBN=128 -DBK=64 -DX_F16 -DSTAGED)
