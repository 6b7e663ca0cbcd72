# Install rules for the daemons and their deployment files. Included by the top-level
# CMakeLists.txt after every target exists.
include(GNUInstallDirs)

# The binaries whose areas do not install them themselves (server/ installs fsdpd).
foreach(binary fsdpd-worker fsdpctl)
  if(TARGET ${binary})
    install(TARGETS ${binary} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()

# systemd looks in <prefix>/lib/systemd/system for both /usr and /usr/local, never lib64.
set(FSDPD_SYSTEMD_UNIT_DIR "lib/systemd/system" CACHE STRING
    "where systemd units are installed, relative to the prefix")
set(FSDPD_SYSUSERS_DIR "lib/sysusers.d" CACHE STRING
    "where the sysusers.d file is installed, relative to the prefix")

# The units in deploy/systemd name the default prefix's paths so that they work as they are.
# Installed copies name the prefix given at install time (cmake --install --prefix, DESTDIR),
# so they are rendered by the install step rather than at configure time.
foreach(unit fsdpd.service fsdpd-worker@.service)
  install(CODE "
    file(READ \"${CMAKE_CURRENT_LIST_DIR}/systemd/${unit}\" unit_text)
    set(bin_dir \"${CMAKE_INSTALL_BINDIR}\")
    set(doc_dir \"${CMAKE_INSTALL_DOCDIR}\")
    if(NOT IS_ABSOLUTE \"\${bin_dir}\")
      set(bin_dir \"\${CMAKE_INSTALL_PREFIX}/\${bin_dir}\")
    endif()
    if(NOT IS_ABSOLUTE \"\${doc_dir}\")
      set(doc_dir \"\${CMAKE_INSTALL_PREFIX}/\${doc_dir}\")
    endif()
    string(REPLACE \"/usr/local/bin/\" \"\${bin_dir}/\" unit_text \"\${unit_text}\")
    string(REPLACE \"/usr/local/share/doc/fsdpd/\" \"\${doc_dir}/\" unit_text \"\${unit_text}\")
    set(unit_path \"\${CMAKE_INSTALL_PREFIX}/${FSDPD_SYSTEMD_UNIT_DIR}/${unit}\")
    message(STATUS \"Installing: \$ENV{DESTDIR}\${unit_path}\")
    file(WRITE \"\$ENV{DESTDIR}\${unit_path}\" \"\${unit_text}\")
    list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\$ENV{DESTDIR}\${unit_path}\")
  " COMPONENT deploy)
endforeach()
install(FILES ${CMAKE_CURRENT_LIST_DIR}/systemd/fsdpd.sysusers.conf
        DESTINATION ${FSDPD_SYSUSERS_DIR} RENAME fsdpd.conf COMPONENT deploy)

# Examples, not live configuration: an upgrade never overwrites what operators put in /etc.
install(FILES ${CMAKE_CURRENT_LIST_DIR}/systemd/fsdpd.env
              ${CMAKE_CURRENT_LIST_DIR}/systemd/fsdpd-worker.env
        DESTINATION ${CMAKE_INSTALL_DATADIR}/fsdpd COMPONENT deploy)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/prometheus/prometheus.yml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/fsdpd/prometheus COMPONENT deploy)
install(DIRECTORY ${CMAKE_CURRENT_LIST_DIR}/prometheus/rules
        DESTINATION ${CMAKE_INSTALL_DATADIR}/fsdpd/prometheus COMPONENT deploy
        FILES_MATCHING PATTERN "*.rules.yml")
install(FILES ${CMAKE_CURRENT_LIST_DIR}/grafana/fsdpd.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/fsdpd/grafana COMPONENT deploy)
install(DIRECTORY ${CMAKE_CURRENT_LIST_DIR}/kubernetes
        DESTINATION ${CMAKE_INSTALL_DATADIR}/fsdpd COMPONENT deploy)
if(EXISTS ${CMAKE_SOURCE_DIR}/docs/operations.md)
  install(FILES ${CMAKE_SOURCE_DIR}/docs/operations.md DESTINATION ${CMAKE_INSTALL_DOCDIR}
          COMPONENT deploy)
endif()
