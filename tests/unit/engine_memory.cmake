# The engine's memory savings: the optimizer in backward against the step after backward.
fsdpd_test(engine_optimizer_in_backward_test LABEL unit TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_optimizer_in_backward_test.cc LIBS fsdpd_engine)
