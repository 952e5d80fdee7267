# Compile-everything tests (label "compile_all"): every kept tensor-core variant of the three
# exported models compiled with NVRTC for sm_80, sm_86, sm_89 and sm_90 (tests/compile_all/).
# Hours on two cores, so neither built by default nor registered unless asked for:
#   scripts/compile_kept_variants.sh                  (builds and runs it, keeps CSV and tables)
#   cmake -DDC_COMPILE_ALL=ON ... && ctest -L compile_all
option(DC_COMPILE_ALL "Register the compile_all ctest tests (hours; README, Tests)" OFF)
add_executable(dc_compile_all_tests EXCLUDE_FROM_ALL
  ${CMAKE_CURRENT_SOURCE_DIR}/compile_all/test_compile_kept_mma.cpp)
target_link_libraries(dc_compile_all_tests PRIVATE dc_coordinator dc_estimator dc_codegen dc_common
  dc_warnings GTest::gtest GTest::gtest_main)
if(DC_COMPILE_ALL)
  set_target_properties(dc_compile_all_tests PROPERTIES EXCLUDE_FROM_ALL OFF)
  foreach(path tf32 fp16 bf16)
    add_test(NAME compile_kept_mma_${path} COMMAND dc_compile_all_tests)
    set_tests_properties(compile_kept_mma_${path} PROPERTIES LABELS compile_all
      FIXTURES_REQUIRED exported_models TIMEOUT 86400
      ENVIRONMENT "DC_MODELS_DIR=${PROJECT_SOURCE_DIR}/models;DC_MMA_PATH=${path}")
  endforeach()
endif()
