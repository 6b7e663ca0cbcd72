# fsdpd-edge's forward and matmul rates on a Vulkan device (bench/edge_bench.sh runs it).
if(TARGET fsdpd_edge)
  add_executable(edge_bench ${CMAKE_CURRENT_LIST_DIR}/edge_bench.cc)
  target_link_libraries(edge_bench PRIVATE fsdpd_edge CLI11::CLI11)
endif()
