# The training engine's unit tests: sharding math, schedules, the key-value store, Gloo
# collectives on threads, the sharded optimizer and FSDP against unsharded references.
fsdpd_test(engine_flat_layout_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_flat_layout_test.cc LIBS fsdpd_engine)
fsdpd_test(engine_lr_schedule_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_lr_schedule_test.cc LIBS fsdpd_engine)
fsdpd_test(engine_file_store_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_file_store_test.cc LIBS fsdpd_engine)
fsdpd_test(engine_host_staged_test LABEL unit TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_host_staged_test.cc LIBS fsdpd_engine)
fsdpd_test(engine_communicator_test LABEL unit TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_communicator_test.cc LIBS fsdpd_engine)
fsdpd_test(engine_mesh_exchange_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_mesh_exchange_test.cc LIBS fsdpd_engine)
fsdpd_test(engine_checked_communicator_test LABEL unit TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_checked_communicator_test.cc LIBS fsdpd_engine)
fsdpd_test(engine_sharded_adamw_test LABEL unit TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_sharded_adamw_test.cc LIBS fsdpd_engine)
fsdpd_test(engine_fsdp_test LABEL unit TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_fsdp_test.cc LIBS fsdpd_engine)
fsdpd_test(engine_env_knobs_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_env_knobs_test.cc LIBS fsdpd_engine)
fsdpd_test(engine_step_batch_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_step_batch_test.cc LIBS fsdpd_engine)
fsdpd_test(engine_split_master_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_split_master_test.cc LIBS fsdpd_engine)
fsdpd_test(engine_background_reading_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_background_reading_test.cc LIBS fsdpd_engine)
