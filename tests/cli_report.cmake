# dc-db report in a real browser (issue 6): headless Chromium renders the HTML report and the
# screenshot must show its plots (tests/cli/check_report_screenshot.py). Label unit: seconds.
add_test(NAME dc_db_report_screenshot COMMAND /usr/bin/python3
  ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_report_screenshot.py $<TARGET_FILE:dc-coordinator>
  $<TARGET_FILE:dc-db> ${PROJECT_SOURCE_DIR}/examples/tiny_cnn/model.onnx
  ${PROJECT_SOURCE_DIR}/examples/tune-quick.yaml)
set_tests_properties(dc_db_report_screenshot PROPERTIES LABELS unit TIMEOUT 300)
