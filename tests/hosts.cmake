# The farm across network namespaces (label hosts, issue 15): needs root and CAP_NET_ADMIN
# (ip netns, veth); elsewhere it exits 77 with the reason, which ctest reports as skipped.
# 30-75 s on the 2-core VM under load; bounded at 150 s by the script itself.
add_test(NAME farm_hosts COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/hosts/farm_hosts.sh
  ${CMAKE_RUNTIME_OUTPUT_DIRECTORY} ${PROJECT_SOURCE_DIR})
set_tests_properties(farm_hosts PROPERTIES LABELS hosts SKIP_RETURN_CODE 77 TIMEOUT 200 RUN_SERIAL TRUE)

# A 2-minute soak of the local farm (scripts/soak.sh; the 30-minute run is in
# docs/bench/soak.md): the three examples back to back, workers killed, garbage connections.
# A tune started before the 2 minutes end runs to its end, so allow more.
add_test(NAME farm_soak_2min COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/soak.sh 2)
set_tests_properties(farm_soak_2min PROPERTIES LABELS long TIMEOUT 900 RUN_SERIAL TRUE
  ENVIRONMENT "DC_BIN=${CMAKE_RUNTIME_OUTPUT_DIRECTORY};DC_SOAK_MODELS=${PROJECT_SOURCE_DIR}/examples/tiny_cnn/model.onnx ${PROJECT_SOURCE_DIR}/examples/tiny_ops/model.onnx ${PROJECT_SOURCE_DIR}/examples/tiny_transformer/model.onnx")
