# fp32 reference ops for the CPU backend (and the oracle for the CUDA kernels): free functions
# on raw pointers, matrix products through OpenBLAS.
add_library(fsdpd_kernels_cpu STATIC
  cpu/adamw.cc
  cpu/attention.cc
  cpu/cross_entropy.cc
  cpu/elementwise.cc
  cpu/embedding.cc
  cpu/gemm.cc
  cpu/fp8.cc
  cpu/linear.cc
  cpu/rmsnorm.cc
  cpu/rotary.cc
  cpu/silu.cc)
target_include_directories(fsdpd_kernels_cpu PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(fsdpd_kernels_cpu PUBLIC PkgConfig::OPENBLAS)
# The demo trains on these loops, so they are optimised even in Debug builds.
target_compile_options(fsdpd_kernels_cpu PRIVATE -O3)
