# The model zoo (scripts/make_zoo.py, docs/zoo.md), label `zoo`: one fixture exports every
# model into build/zoo (about a minute), then each model goes through verify, a quick
# emulated tune and dc-run --emulate --data (scripts/run_zoo.py), and must end as
# tests/zoo_expected.txt lists it: `pass`, or its exact refusal line. CI runs the models in
# DC_ZOO_CI (the ones whose emulated tune fits its time); -DDC_ZOO_ALL=ON registers all of
# them, and `scripts/run_zoo.py build/zoo` runs all of them by hand.
option(DC_ZOO_ALL "register every zoo model as a ctest test, not only CI's part" OFF)
set(DC_ZOO_CI unet_convt style_transfer audio_frontend encoder_hf_op18 decoder_hf_op21)
set(DC_ZOO_REST resnet18 lraspp_mbv3 fpn_resnet18 encoder_hf decoder_hf)
set(DC_ZOO_DIR ${CMAKE_BINARY_DIR}/zoo)
add_test(NAME zoo_export COMMAND ${DC_PY} ${PROJECT_SOURCE_DIR}/scripts/make_zoo.py ${DC_ZOO_DIR})
set_tests_properties(zoo_export PROPERTIES LABELS zoo FIXTURES_SETUP zoo_models TIMEOUT 900)
set(zoo_models ${DC_ZOO_CI})
if(DC_ZOO_ALL)
  list(APPEND zoo_models ${DC_ZOO_REST})
endif()
foreach(model ${zoo_models})
  add_test(NAME zoo_${model} COMMAND ${DC_PY} ${PROJECT_SOURCE_DIR}/scripts/run_zoo.py ${DC_ZOO_DIR}
    --models ${model} --coord ${DC_COORD} --dc-run ${DC_RUN}
    --expect ${CMAKE_CURRENT_SOURCE_DIR}/zoo_expected.txt)
  set_tests_properties(zoo_${model} PROPERTIES LABELS zoo FIXTURES_REQUIRED zoo_models TIMEOUT 1500)
endforeach()
