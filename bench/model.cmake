# model_logits: an exported model's logits for a batch (bench/check_hf_export.py reads them).
if(TARGET fsdpd_model AND TARGET fsdpd_io)
  add_executable(model_logits ${CMAKE_CURRENT_LIST_DIR}/model_logits.cc)
  target_include_directories(model_logits PRIVATE ${CMAKE_SOURCE_DIR})
  target_link_libraries(model_logits PRIVATE fsdpd_model fsdpd_io CLI11::CLI11)
endif()
