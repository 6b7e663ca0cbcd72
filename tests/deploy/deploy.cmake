# Tests of deploy/: systemd units, Prometheus configuration and alert rules, the Grafana
# dashboard, and the Kubernetes manifests. They run the real tools (systemd-analyze, promtool,
# kubectl kustomize) and need no daemon, except the integration tests at the end.
find_program(FSDPD_PYTHON3 NAMES python3)
if(NOT FSDPD_PYTHON3)
  set(FSDPD_PYTHON3 python3)  # the tests then fail with the shell's "not found"
endif()
set(deploy_tests_dir ${CMAKE_CURRENT_LIST_DIR})
set(deploy_source_dir ${CMAKE_SOURCE_DIR})

# The installed units start the built binaries when they exist, stand-ins otherwise.
set(deploy_unit_binaries "")
if(TARGET fsdpd)
  list(APPEND deploy_unit_binaries "FSDPD_BINARY=$<TARGET_FILE:fsdpd>")
endif()
if(TARGET fsdpd-worker)
  list(APPEND deploy_unit_binaries "FSDPD_WORKER_BINARY=$<TARGET_FILE:fsdpd-worker>")
endif()
add_test(NAME deploy_systemd_units
         COMMAND bash ${deploy_tests_dir}/systemd_units_test.sh ${CMAKE_BINARY_DIR}
                 ${CMAKE_COMMAND})

add_test(NAME deploy_prometheus_config
         COMMAND promtool check config ${deploy_source_dir}/deploy/prometheus/prometheus.yml)
add_test(NAME deploy_prometheus_rules_check
         COMMAND promtool check rules
                 ${deploy_source_dir}/deploy/prometheus/rules/fsdpd.rules.yml)
# Each alert fires on the series that should raise it and stays silent on healthy ones.
add_test(NAME deploy_prometheus_rules_fire
         COMMAND promtool test rules ${deploy_tests_dir}/fsdpd.rules.test.yml)

add_test(NAME deploy_grafana_dashboard
         COMMAND ${FSDPD_PYTHON3} ${deploy_tests_dir}/dashboard_test.py ${deploy_source_dir})
# prometheus_panels.py's verdicts (what the live dashboard test relies on), against a stand-in.
add_test(NAME deploy_prometheus_panels_tool
         COMMAND ${FSDPD_PYTHON3} ${deploy_tests_dir}/prometheus_panels_test.py)
add_test(NAME deploy_kubernetes_manifests
         COMMAND ${FSDPD_PYTHON3} ${deploy_tests_dir}/kubernetes_test.py ${deploy_source_dir})
add_test(NAME deploy_kubernetes_worker_entrypoint
         COMMAND bash ${deploy_tests_dir}/worker_entrypoint_test.sh ${deploy_source_dir})

set_tests_properties(
  deploy_systemd_units deploy_prometheus_config deploy_prometheus_rules_check
  deploy_prometheus_rules_fire deploy_grafana_dashboard deploy_prometheus_panels_tool
  deploy_kubernetes_manifests
  deploy_kubernetes_worker_entrypoint
  PROPERTIES LABELS unit TIMEOUT 120
             ENVIRONMENT
             "FSDPD_SOURCE_DIR=${deploy_source_dir};FSDPD_BUILD_DIR=${CMAKE_BINARY_DIR}")
if(deploy_unit_binaries)
  set_property(TEST deploy_systemd_units APPEND PROPERTY ENVIRONMENT ${deploy_unit_binaries})
endif()

# fsdpd itself keeps the Type=notify / WatchdogSec contract of fsdpd.service.
if(TARGET fsdpd)
  add_test(NAME deploy_systemd_notify
           COMMAND ${FSDPD_PYTHON3} ${deploy_tests_dir}/systemd_notify_test.py
                   $<TARGET_FILE:fsdpd>)
  set_tests_properties(deploy_systemd_notify PROPERTIES LABELS integration TIMEOUT 120)
endif()

# Every dashboard query against a real Prometheus scraping a real fsdpd while a CPU job trains
# and after its series' retention, and the lost-worker alerts firing and resolving.
if(TARGET fsdpd AND TARGET fsdpd-worker AND TARGET fsdpctl)
  add_test(NAME deploy_prometheus_dashboard
           COMMAND bash ${deploy_tests_dir}/prometheus_dashboard_test.sh)
  set(dashboard_test_environment
      "FSDPD_SOURCE_DIR=${deploy_source_dir}" "FSDPD_BUILD_DIR=${CMAKE_BINARY_DIR}"
      "FSDPD_BINARY=$<TARGET_FILE:fsdpd>" "FSDPD_WORKER_BINARY=$<TARGET_FILE:fsdpd-worker>"
      "FSDPCTL_BINARY=$<TARGET_FILE:fsdpctl>")
  set_tests_properties(deploy_prometheus_dashboard PROPERTIES
    LABELS integration TIMEOUT 600 RUN_SERIAL TRUE ENVIRONMENT "${dashboard_test_environment}")
endif()
