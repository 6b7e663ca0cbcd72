# The edge runtime (edge/) on lavapipe with the Vulkan validation layer: each shader against
# the CPU reference, a trained and exported model end to end, and bad inputs. Labelled
# integration: they need a Vulkan driver (Mesa's JIT is not built for the ASan unit run).
# The config metadata needs no Vulkan: a unit test (ASan runs it too).
fsdpd_test(edge_metadata_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_metadata_test.cc LIBS fsdpd_formats)
if(NOT TARGET fsdpd_edge)
  if(fsdpd_edge_choice MATCHES "^(OFF|FALSE|NO|0)$")
    fsdpd_drop_tests("every edge test but edge_metadata_test" "-DFSDPD_EDGE=OFF")
  else()
    fsdpd_drop_tests("every edge test but edge_metadata_test"
                     "no Vulkan loader or glslc: Debian libvulkan-dev and glslc")
  endif()
endif()
if(TARGET fsdpd_edge)
  fsdpd_test(edge_matmul_tuner_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_matmul_tuner_test.cc LIBS fsdpd_edge_tuner)
  fsdpd_test(edge_quantize_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_quantize_test.cc LIBS fsdpd_edge_quantize)
  fsdpd_test(edge_int8_test LABEL integration TIMEOUT 300
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_int8_test.cc LIBS fsdpd_edge)
  fsdpd_test(edge_kernels_test LABEL integration TIMEOUT 300
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_kernels_test.cc LIBS fsdpd_edge)
  fsdpd_test(edge_argmax_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_argmax_test.cc LIBS fsdpd_edge)
  fsdpd_test(edge_batches_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_batches_test.cc LIBS fsdpd_edge)
  fsdpd_test(edge_fused_linear_test LABEL integration TIMEOUT 300
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_fused_linear_test.cc LIBS fsdpd_edge)
  fsdpd_test(edge_decoding_test LABEL integration TIMEOUT 300
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_decoding_test.cc LIBS fsdpd_edge)
  fsdpd_test(edge_pipelines_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_pipelines_test.cc
    LIBS fsdpd_edge fsdpd_edge_probe_shaders)
  # The generated shader tables against their lists; no Vulkan driver needed. The probes' table
  # and library are bench/edge.cmake's (the link resolves once every file is read).
  fsdpd_test(edge_shader_table_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_shader_table_test.cc
    LIBS fsdpd_edge_shaders fsdpd_edge_probe_shaders)
  target_compile_definitions(edge_shader_table_test PRIVATE
    FSDPD_DEFAULT_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    EDGE_HAVE_CM2=$<BOOL:$<TARGET_EXISTS:edge_glsl_to_spirv>>)
  fsdpd_test(edge_probes_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_probes_test.cc LIBS fsdpd_edge_probes)
  fsdpd_test(edge_matvec_chain_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_matvec_chain_test.cc LIBS fsdpd_edge_probes)
  fsdpd_test(edge_op_times_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_op_times_test.cc LIBS fsdpd_edge)
  fsdpd_test(edge_descriptor_sets_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_descriptor_sets_test.cc LIBS fsdpd_edge)
  fsdpd_test(edge_lifecycle_test LABEL integration TIMEOUT 600
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_lifecycle_test.cc LIBS fsdpd_edge)
endif()
if(TARGET fsdpd_edge AND TARGET fsdpd_engine)
  fsdpd_test(edge_model_test LABEL integration TIMEOUT 300
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_model_test.cc LIBS fsdpd_edge fsdpd_engine)
  target_compile_definitions(edge_model_test PRIVATE
    FSDPD_DEFAULT_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
endif()
if(TARGET fsdpd-edge)
  fsdpd_test(edge_cli_test LABEL integration TIMEOUT 300
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_cli_test.cc LIBS fsdpd_edge)
  target_compile_definitions(edge_cli_test PRIVATE FSDPD_EDGE_BINARY="$<TARGET_FILE:fsdpd-edge>")
  add_dependencies(edge_cli_test fsdpd-edge)
endif()
# Through a real coordinator, CPU workers and fsdpctl export (tests/integration's harness, which
# tests/integration/integration.cmake defines; the link resolves once every file is read).
if(TARGET fsdpd-edge AND TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl)
  fsdpd_test(edge_cluster_test LABEL integration TIMEOUT 300
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_cluster_test.cc
    LIBS fsdpd_process_harness fsdpd_formats)
  target_compile_definitions(edge_cluster_test PRIVATE
    FSDPD_EDGE_BINARY="$<TARGET_FILE:fsdpd-edge>" FSDPD_DEFAULT_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  add_dependencies(edge_cluster_test fsdpd-edge fsdpd fsdpd-worker fsdpctl)
endif()
if(TARGET edge_glsl_to_spirv)
  fsdpd_test(edge_glsl_to_spirv_test LABEL integration
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/edge_glsl_to_spirv_test.cc LIBS absl::strings)
  target_compile_definitions(edge_glsl_to_spirv_test PRIVATE
    EDGE_GLSL_TOOL="$<TARGET_FILE:edge_glsl_to_spirv>"
    EDGE_GLSLANG_LIBRARY="$<TARGET_PROPERTY:edge_glsl_to_spirv,EDGE_GLSLANG_LIBRARY>"
    EDGE_SHADER_DIR="${CMAKE_SOURCE_DIR}/edge/shaders")
  add_dependencies(edge_glsl_to_spirv_test edge_glsl_to_spirv)
elseif(TARGET fsdpd_edge)
  fsdpd_drop_tests(edge_glsl_to_spirv_test
                   "no glslang with GL_NV_cooperative_matrix2: the slangpy wheel's libslang-glslang")
endif()
