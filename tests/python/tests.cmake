# The Python package's pytest suite (tests/python, docs/python.md), included from the top
# level CMakeLists.txt when the package is built. Labels:
#   python   everything below but the GPU and long checks
#   unit     also the Session tests (seconds)
#   gpu      the CUDA-tensor path (skipped with the reason where there is no GPU;
#            DC_REQUIRE_GPU=1 makes that a failure)
#   long     ResNet-50 and torchvision acceptance (exported models)
set(DC_PYTEST ${Python3_EXECUTABLE} -m pytest -q -rs -p no:cacheprovider)
set(DC_PYTEST_DIR ${CMAKE_CURRENT_LIST_DIR})
set(DC_PYTEST_ENV PYTHONPATH=${CMAKE_BINARY_DIR}/python DC_SOURCE_DIR=${PROJECT_SOURCE_DIR}
  DC_BIN_DIR=${CMAKE_RUNTIME_OUTPUT_DIRECTORY} DC_MODELS_DIR=${PROJECT_SOURCE_DIR}/models)

function(dc_pytest name labels timeout)
  add_test(NAME ${name} COMMAND ${DC_PYTEST} --basetemp=${CMAKE_BINARY_DIR}/pytest-${name} ${ARGN}
    WORKING_DIRECTORY ${DC_PYTEST_DIR})
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${timeout}
    ENVIRONMENT "${DC_PYTEST_ENV}")
endfunction()

dc_pytest(python_session "python;unit" 300 test_session.py)
dc_pytest(python_training "python;unit" 300 test_training.py)
dc_pytest(python_tune "python" 900 test_tune.py test_torch.py)
dc_pytest(python_gpu "gpu" 900 test_gpu.py)
set_tests_properties(python_gpu PROPERTIES SKIP_REGULAR_EXPRESSION "(^|\n)[0-9]+ skipped in")
dc_pytest(python_long "long" 3600 test_long.py)
set_tests_properties(python_long PROPERTIES FIXTURES_REQUIRED exported_models)
