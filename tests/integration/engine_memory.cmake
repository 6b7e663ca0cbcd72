# The engine's memory savings end to end: RunTrainer with the optimizer in backward.
fsdpd_test(engine_trainer_in_backward_test LABEL integration TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_trainer_in_backward_test.cc LIBS fsdpd_engine)
