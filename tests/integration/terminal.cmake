# What fsdpctl shows a person, through the real binaries on loopback: `watch` and `logs -f` on a
# real terminal (tmux) at 120, 80 and 60 columns and across coordinator restarts, and the roofline
# chart rendered to PNG and checked for overlapping or cut-off text.
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl)
  find_program(FSDPD_PYTHON3 NAMES python3)
  if(NOT FSDPD_PYTHON3)
    set(FSDPD_PYTHON3 python3)  # the tests then fail with the shell's "not found"
  endif()
  find_program(FSDPD_TMUX NAMES tmux)
  if(FSDPD_TMUX)
    add_test(NAME watch_logs_terminal
             COMMAND ${FSDPD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/terminal_test.py
                     ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
    set_tests_properties(watch_logs_terminal PROPERTIES LABELS integration TIMEOUT 900)
  else()
    fsdpd_drop_tests(watch_logs_terminal "no tmux: Debian tmux")
  endif()
  find_program(FSDPD_RSVG_CONVERT NAMES rsvg-convert)
  if(FSDPD_RSVG_CONVERT)
    add_test(NAME roofline_picture
             COMMAND ${FSDPD_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/roofline_picture_test.py
                     ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
    set_tests_properties(roofline_picture PROPERTIES LABELS integration TIMEOUT 600)
  else()
    fsdpd_drop_tests(roofline_picture "no rsvg-convert: Debian librsvg2-bin")
  endif()
endif()
