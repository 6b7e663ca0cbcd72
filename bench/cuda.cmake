# Kernel benchmarks of the CUDA backend (not tests; they print figures for RESULTS.md).
if(FSDPD_CUDA AND TARGET fsdpd_cuda_backend)
  add_executable(cuda_kernels_bench ${CMAKE_CURRENT_LIST_DIR}/cuda_kernels_bench.cc)
  target_link_libraries(cuda_kernels_bench PRIVATE fsdpd_cuda_backend fsdpd_kernels_cuda fsdpd_model)
  # The device memory a worker's setup takes outside the caching allocator, stage by stage.
  add_executable(cuda_memory_probe ${CMAKE_CURRENT_LIST_DIR}/cuda_memory_probe.cc)
  target_link_libraries(cuda_memory_probe PRIVATE fsdpd_cuda_backend fsdpd_profiler fsdpd_nccl fsdpd_engine)
endif()
# Short-timing against power-limited rates of each cuBLASLt candidate on the seed's products.
if(FSDPD_CUDA)
  add_executable(gemm_power_bench ${CMAKE_CURRENT_LIST_DIR}/gemm_power_bench.cc)
  target_link_libraries(gemm_power_bench PRIVATE CUDA::cublasLt CUDA::cudart absl::status absl::statusor
    absl::strings)
endif()
# bf16 against FP8 (with its casts) for each product of the seed's linear layers.
if(FSDPD_CUDA)
  add_executable(fp8_gemm_bench ${CMAKE_CURRENT_LIST_DIR}/fp8_gemm_bench.cc)
  target_link_libraries(fp8_gemm_bench PRIVATE fsdpd_kernels_cuda CUDA::cublasLt CUDA::cudart
    absl::status absl::statusor absl::strings)
endif()
