fsdpd_test(spec_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/spec_test.cc
  LIBS fsdpd_spec)
fsdpd_test(spec_validate_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/spec_validate_test.cc
  LIBS fsdpd_spec)
fsdpd_test(spec_path_fields_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/spec_path_fields_test.cc
  LIBS fsdpd_spec)
fsdpd_test(spec_grad_accum_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/spec_grad_accum_test.cc
  LIBS fsdpd_spec)
fsdpd_test(spec_eval_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/spec_eval_test.cc
  LIBS fsdpd_spec)
fsdpd_test(spec_llama_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/spec_llama_test.cc
  LIBS fsdpd_spec)
