# fsdpd-edge's forward and matmul rates on a Vulkan device (bench/edge_bench.sh runs it), and the
# probes of what bounds the matmul and decoding (bench/edge_probes.h, bench/edge_matvec_chain.h),
# whose shaders are listed in bench/edge_shaders/variants.cmake and generated as
# edge/shaders/variants.cmake's are.
if(TARGET fsdpd_edge)
  include(${CMAKE_SOURCE_DIR}/edge/shader_table.cmake)
  edge_shader_table(fsdpd_edge_probe_shaders
                    LIST ${CMAKE_CURRENT_LIST_DIR}/edge_shaders/variants.cmake
                    ENUM ProbeShader HEADER bench/edge_shaders/variants.h)
  add_library(fsdpd_edge_probes STATIC ${CMAKE_CURRENT_LIST_DIR}/edge_probes.cc
              ${CMAKE_CURRENT_LIST_DIR}/edge_probe_support.cc
              ${CMAKE_CURRENT_LIST_DIR}/edge_matvec_chain.cc)
  target_link_libraries(fsdpd_edge_probes PUBLIC fsdpd_edge fsdpd_edge_probe_shaders)
  add_executable(edge_bench ${CMAKE_CURRENT_LIST_DIR}/edge_bench.cc
                 ${CMAKE_CURRENT_LIST_DIR}/edge_probe_reports.cc)
  target_link_libraries(edge_bench PRIVATE fsdpd_edge fsdpd_edge_probes CLI11::CLI11)
endif()
