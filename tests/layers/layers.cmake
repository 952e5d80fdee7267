# The layering check (docs/architecture.md, "Layers"): writes every target of the tree with
# its source folder and its direct link dependencies to ${CMAKE_BINARY_DIR}/layers/targets.txt,
# one line per target: `NAME<TAB>SOURCE_DIR<TAB>DEP;DEP;...`. scripts/check_layers.py reads it
# (links) and the sources' quoted includes, and fails on any edge that points the wrong way.
function(dc_collect_targets dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    dc_collect_targets(${sub} sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

if(NOT Python3_EXECUTABLE)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
endif()
dc_collect_targets(${PROJECT_SOURCE_DIR} dc_all_targets)
set(dc_layers_text "")
foreach(t ${dc_all_targets})
  get_target_property(type ${t} TYPE)
  get_target_property(src ${t} SOURCE_DIR)
  set(deps "")
  if(type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(deps ${t} INTERFACE_LINK_LIBRARIES)
  else()
    get_target_property(deps ${t} LINK_LIBRARIES)
  endif()
  if(NOT deps)
    set(deps "")
  endif()
  # Only the tree's own targets matter here; generator expressions and imported libraries
  # (spdlog::spdlog, CUDA::nvrtc, ...) are left out.
  set(own "")
  foreach(d ${deps})
    if(TARGET ${d})
      get_target_property(imported ${d} IMPORTED)
      if(NOT imported)
        list(APPEND own ${d})
      endif()
    endif()
  endforeach()
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${src})
  string(APPEND dc_layers_text "${t}\t${rel}\t${own}\n")
endforeach()
file(WRITE ${CMAKE_BINARY_DIR}/layers/targets.txt "${dc_layers_text}")

add_test(NAME layering
  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/check_layers.py
    --source ${PROJECT_SOURCE_DIR} --targets ${CMAKE_BINARY_DIR}/layers/targets.txt)
# The check must be able to fail: one planted include from common/ into codegen/ and one
# planted link from dc_common to dc_codegen, each reported by name.
add_test(NAME layering_catches_planted_include
  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/check_layers.py
    --source ${PROJECT_SOURCE_DIR} --targets ${CMAKE_BINARY_DIR}/layers/targets.txt
    --plant-include common/ir/graph.h:variant.h)
add_test(NAME layering_catches_planted_link
  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/check_layers.py
    --source ${PROJECT_SOURCE_DIR} --targets ${CMAKE_BINARY_DIR}/layers/targets.txt
    --plant-link dc_common:dc_codegen)
set_tests_properties(layering PROPERTIES LABELS unit)
set_tests_properties(layering_catches_planted_include PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "common/ir/graph.h \\(common\\) includes codegen/variant.h \\(codegen\\)")
set_tests_properties(layering_catches_planted_link PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "dc_common \\(common\\) links dc_codegen \\(codegen\\)")

# Templates from parts (issue 24, docs/codegen.md): no function in codegen/ is over 120
# lines; and the check can fail: the fixture's 129-line function is reported by name.
add_test(NAME function_length_codegen
  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/check_function_length.py --limit 120
    ${PROJECT_SOURCE_DIR}/codegen)
add_test(NAME function_length_catches_a_long_function
  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/check_function_length.py --limit 120
    ${PROJECT_SOURCE_DIR}/tests/data/function_length)
set_tests_properties(function_length_codegen PROPERTIES LABELS unit)
set_tests_properties(function_length_catches_a_long_function PROPERTIES LABELS unit WILL_FAIL FALSE
  PASS_REGULAR_EXPRESSION "too_long.cpp:9: 129 lines \\(limit 120\\): int too_long_function")
