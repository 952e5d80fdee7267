# dc-run and libdcrt (issue 7), label unit. Included from tests/CMakeLists.txt.
set(DC_RUN $<TARGET_FILE:dc-run>)

# `expect_exit NAME CODE REGEX COMMAND...`: the command exits with CODE and its output
# (stdout and stderr) matches the extended regular expression REGEX.
set(DC_EXPECT_EXIT [=[
code="$1"; regex="$2"; shift 2
out="$("$@" 2>&1)"; rc=$?
printf '%s\n' "$out"
[ "$rc" -eq "$code" ] || { echo "exit code $rc, expected $code"; exit 1; }
printf '%s\n' "$out" | grep -Eq -- "$regex" || { echo "output does not match: $regex"; exit 1; }
]=])
function(dc_run_expect_exit name code regex)
  add_test(NAME ${name} COMMAND bash -c "${DC_EXPECT_EXIT}" ${name} ${code} ${regex} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS unit)
endfunction()

add_test(NAME cli_run_help COMMAND ${DC_RUN} --help)
set_tests_properties(cli_run_help PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "usage: dc-run PLAN_DIR.*--emulate.*example:.*--bench")

dc_run_expect_exit(cli_run_missing_plan 2 "^error: .*/nonexistent/dc-plan"
  ${DC_RUN} /nonexistent/dc-plan --emulate)
dc_run_expect_exit(cli_run_needs_plan 2 "^error: dc-run needs a plan directory" ${DC_RUN} --emulate)
dc_run_expect_exit(cli_run_emulate_bench 2 "^error: --bench needs a GPU: the host emulator has no timing"
  ${DC_RUN} /nonexistent/dc-plan --emulate --bench 10)
dc_run_expect_exit(cli_run_bad_flag 2 "^error: .*--no-such-flag" ${DC_RUN} plan --no-such-flag)

# dcrt.h is C99: compiles as C with every warning as an error.
find_program(DC_C_COMPILER NAMES cc gcc clang)
if(DC_C_COMPILER)
  add_test(NAME dcrt_header_is_c99 COMMAND ${DC_C_COMPILER} -std=c99 -Wall -Wextra -Wpedantic
    -Werror -fsyntax-only -x c ${PROJECT_SOURCE_DIR}/codegen/plan_runtime/dcrt.h)
  set_tests_properties(dcrt_header_is_c99 PROPERTIES LABELS unit)
endif()

# libdcrt.so exports its C API and nothing else (no C++ symbols of dc or its libraries).
find_program(DC_NM nm)
if(DC_NM)
  add_test(NAME dcrt_exports_only_the_c_api COMMAND bash -c [=[
syms="$("$0" -D --defined-only "$1" | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}')"
printf '%s\n' "$syms" | grep -q '^dcrt_run$' || { echo "dcrt_run is not exported"; exit 1; }
other="$(printf '%s\n' "$syms" | grep -Ev '^(dcrt_|_init$|_fini$|_edata$|_end$|__bss_start$)' || true)"
[ -z "$other" ] || { echo "exported beyond the C API:"; printf '%s\n' "$other" | head -20; exit 1; }
echo "$(printf '%s\n' "$syms" | grep -c '^dcrt_') dcrt_ symbols exported"
]=] ${DC_NM} $<TARGET_FILE:dcrt>)
  set_tests_properties(dcrt_exports_only_the_c_api PROPERTIES LABELS unit)
endif()

# libdcrt.so is deployed into applications: it must not need the farm's libraries (issue 13).
# readelf -d lists its DT_NEEDED entries (direct), ldd the whole closure (indirect too);
# neither may name yaml-cpp, ZeroMQ or protobuf.
find_program(DC_READELF readelf)
find_program(DC_LDD ldd)
if(DC_READELF AND DC_LDD)
  add_test(NAME dcrt_needs_no_farm_libraries COMMAND bash -c [=[
needed="$("$0" -d "$2" | grep '(NEEDED)')" || { echo "readelf found no DT_NEEDED in $2"; exit 1; }
closure="$("$1" "$2")" || { echo "ldd failed on $2"; exit 1; }
printf '%s\n' "$needed"
printf '%s\n%s\n' "$needed" "$closure" | grep -q 'libstdc++' || { echo "no libstdc++: wrong file?"; exit 1; }
bad="$(printf '%s\n%s\n' "$needed" "$closure" | grep -Ei 'yaml|zmq|protobuf' || true)"
[ -z "$bad" ] || { echo "libdcrt.so needs a farm library:"; printf '%s\n' "$bad"; exit 1; }
echo "no yaml-cpp, ZeroMQ or protobuf"
]=] ${DC_READELF} ${DC_LDD} $<TARGET_FILE:dcrt>)
  set_tests_properties(dcrt_needs_no_farm_libraries PROPERTIES LABELS unit)
endif()
