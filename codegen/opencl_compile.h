// Compiling OpenCL sources (codegen/opencl_dialect.h) ahead of the device: clang's OpenCL
// front end, C++ for OpenCL 2021 with the generic address space, to SPIR (LLVM bitcode for
// target spir64), which a device takes with clCreateProgramWithBinary + clBuildProgram
// ("-x spir"). PoCL reads bitcode of its own LLVM version or older, so the worker names the
// clang that matches its device (opencl_clang_for). Results are kept on disk under
// DIR/opencl/<key>.bc (key: source, clang version, flags), published by rename.
#pragma once

#include <string>
#include <vector>

namespace dc {

struct OpenClCompileResult {
  bool ok = false;
  std::string error;          // clang's diagnostics (or why clang did not run)
  std::vector<char> binary;   // SPIR bitcode
  double compile_seconds = 0;
  bool from_cache = false;
};

// The clang executable for a device whose OpenCL platform reports `platform_version`
// ("OpenCL 3.0 PoCL 3.1+debian ... LLVM 15.0.6 ..."): clang-<that major> where it is on
// PATH, else "clang". "" for `platform_version` gives the newest clang-N on PATH.
std::string opencl_clang_for(const std::string& platform_version);

// The flags given to clang for the source (after the executable; "-S", the input and "-o OUT"
// follow: textual IR, which name_kernel_locals edits before clang assembles it to bitcode).
std::vector<std::string> opencl_clang_flags();

// `ir` (textual LLVM IR of a C++ for OpenCL module) with each kernel's `__local` variables
// named as OpenCL C names them, `<kernel>.<name>`: C++ mangles them as function-local statics
// (`_ZZ10row_reduceE8dcr_red0`), and PoCL takes only the OpenCL C form for a work-group's own
// local memory; others it treats as program-scope, one copy shared by all work-groups.
std::string name_kernel_locals(const std::string& ir);

// Compiles `cl_source` with `clang` (a name on PATH or a path) through the cache in
// `cache_dir` ("" = no cache). Never throws for the source's errors: ok=false, error set.
OpenClCompileResult compile_opencl(const std::string& cl_source, const std::string& clang,
                                   const std::string& cache_dir);

// clang's first line of --version ("" when it does not run): part of the cache key.
std::string clang_version(const std::string& clang);

}  // namespace dc
