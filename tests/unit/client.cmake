# fsdpctl's pictures: the roofline SVG (parsed back with expat, an XML parser) and the sparkline.
find_package(EXPAT)
if(EXPAT_FOUND)
  fsdpd_test(client_charts_test LABEL unit
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/client_charts_test.cc
    LIBS fsdpd_client_charts EXPAT::EXPAT)
else()
  fsdpd_drop_tests(client_charts_test "no expat: Debian libexpat1-dev")
endif()

# fsdpctl watch's progress line, loss sparkline and terminal width.
fsdpd_test(client_terminal_test LABEL unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/client_terminal_test.cc
  LIBS fsdpd_client_charts)
