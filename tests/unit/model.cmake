# CPU reference kernels, the CPU backend and the models (MiniLLM, Llama).
fsdpd_test(kernels_cpu_gradient_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kernels_cpu_gradient_test.cc LIBS fsdpd_kernels_cpu)
fsdpd_test(kernels_cpu_llama_gradient_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kernels_cpu_llama_gradient_test.cc LIBS fsdpd_kernels_cpu)
fsdpd_test(kernels_cpu_fp8_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kernels_cpu_fp8_test.cc LIBS fsdpd_kernels_cpu)
fsdpd_test(kernels_cpu_elementwise_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kernels_cpu_elementwise_test.cc LIBS fsdpd_kernels_cpu)
fsdpd_test(model_backend_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_backend_test.cc LIBS fsdpd_model)
# The ops contract, checked once by CheckedOps in front of the backend's ops.
fsdpd_test(model_checked_ops_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_checked_ops_test.cc LIBS fsdpd_model)
fsdpd_test(model_minillm_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_minillm_test.cc LIBS fsdpd_model)
# Against PyTorch's fixtures; needs the safetensors reader of fsdpd_io.
if(TARGET fsdpd_io)
  fsdpd_test(model_golden_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_golden_test.cc
    LIBS fsdpd_model fsdpd_io nlohmann_json::nlohmann_json)
  target_compile_definitions(model_golden_test PRIVATE
    FSDPD_GOLDEN_DIR="${CMAKE_SOURCE_DIR}/tests/golden/tiny")
  # Llama against transformers' LlamaForCausalLM (tests/golden/make_llama_fixtures.py).
  fsdpd_test(model_llama_golden_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_llama_golden_test.cc
    LIBS fsdpd_model fsdpd_io nlohmann_json::nlohmann_json)
  target_compile_definitions(model_llama_golden_test PRIVATE
    FSDPD_GOLDEN_ROOT="${CMAKE_SOURCE_DIR}/tests/golden")
endif()
