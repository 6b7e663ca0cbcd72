# The backend interface's CPU implementation and the models (MiniLLM, Llama), written once
# against that interface.
add_library(fsdpd_model STATIC
  backend/tensor.cc
  backend/op_arguments.cc
  backend/checked_ops.cc
  backend/cpu_ops.cc
  backend/cpu_backend.cc
  model/model_config.cc
  model/parameter_names.cc
  model/minillm.cc
  model/minillm_backward.cc)
target_include_directories(fsdpd_model PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(fsdpd_model PUBLIC fsdpd_kernels_cpu fsdpd_spec absl::status
                      absl::statusor absl::strings spdlog::spdlog)
