# Activation recompute: bit-identical training with a smaller activation workspace.
fsdpd_test(model_recompute_test LABEL unit TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_recompute_test.cc LIBS fsdpd_engine)
# Llama's layout, initialisation and training through FsdpState (recompute, two ranks).
fsdpd_test(model_llama_test LABEL unit TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/model_llama_test.cc LIBS fsdpd_engine)
