# Activation recompute: bit-identical training with a smaller activation workspace.
fsdpd_test(model_recompute_test LABEL unit TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_recompute_test.cc LIBS fsdpd_engine)
