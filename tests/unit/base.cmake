# The helpers of base/ that several layers share.
fsdpd_test(base_helpers_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/base_helpers_test.cc LIBS fsdpd_base)
