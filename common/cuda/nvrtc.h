// Compiling generated CUDA C++ with NVRTC for one GPU architecture, without a GPU: the
// source (common/ir/kernel.h conventions, prelude first) goes in, a CUBIN for sm_XX and the
// ptxas resource figures of every kernel (registers, spills, shared memory, stack) come out.
//
// A source that does not compile is a result (ok=false, with the log), never an exception:
// the farm records it as compile_error. Only a caller's mistake, an architecture NVRTC does
// not support, throws a UserError.
//
// NVRTC is loaded at run time (nvrtc_loader.h): each compile uses the newest installed NVRTC
// that targets its architecture, so sm_70 compiles with NVRTC 12 and sm_80 with 13 in one
// process.
//
// Thread safety: NVRTC may compile distinct programs concurrently; every call here creates,
// uses and destroys its own program, so all functions may be called from any thread.
// See docs/compilation.md for the options used and the CUDA 12 / 13 differences.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dc {

// ptxas figures of one entry function (from `--ptxas-options=-v`).
struct KernelResources {
  std::string kernel;           // entry name as in the source (extern "C": unmangled)
  int registers = 0;            // registers per thread
  int spill_stores_bytes = 0;   // bytes per thread spilled to local memory
  int spill_loads_bytes = 0;
  int64_t static_smem_bytes = 0;  // __shared__ arrays; dynamic shared memory is not included
  int64_t const_bytes = 0;      // constant banks the kernel itself uses (cmem[N] summed;
                                // bank 0 holds the parameters)
  int64_t stack_bytes = 0;      // per-thread stack: the larger of the frame and the
                                // cumulative stack size (local arrays, spills, calls)
};

struct CompileResult {
  bool ok = false;
  std::string arch;             // "sm_80"
  std::string log;              // the full NVRTC log: diagnostics and ptxas info lines
  std::string error;            // first error line(s) with their source line, for messages
  std::vector<char> cubin;      // ELF for `arch`, loadable with cuModuleLoadData
  std::string ptx;              // only with CompileOptions::keep_ptx
  std::vector<KernelResources> kernels;  // one per entry function, in ptxas's order
  double compile_seconds = 0;
  std::string nvrtc_version;    // "13.0"
};

struct CompileOptions {
  std::vector<std::string> extra_flags;  // passed to NVRTC after ours (e.g. "-DDC_FOO=1")
  bool keep_ptx = false;
  bool line_info = false;                // -lineinfo: source lines in profilers
  int max_registers = 0;                 // --maxrregcount when > 0
  int min_blocks_per_sm = 0;             // ptxas --minnctapersm when > 0
  // ptxas picks its own register target when nothing bounds it, and at some targets it
  // spills a few bytes far below the limit (docs/compilation.md, "Spills below the register
  // limit"). With this set, a compile that spills with max_registers and min_blocks_per_sm
  // both 0 is compiled again with min_blocks_per_sm = 1, and the second result is kept when
  // it spills fewer bytes.
  bool retry_spills = true;
};

// Compiles `source` for `arch` ("sm_80"; see supported_archs()) with the newest installed
// NVRTC that targets it. Throws UserError if no installed NVRTC targets the architecture
// (saying what to install); every other failure is returned as ok=false.
CompileResult compile_cuda(const std::string& source, const std::string& arch,
                           const CompileOptions& options = {});

// Compiles one source for several architectures on up to `threads` threads (at least one);
// results in the order of `archs`. Every arch is checked before any compile starts.
std::vector<CompileResult> compile_for_archs(const std::string& source,
                                             const std::vector<std::string>& archs, int threads,
                                             const CompileOptions& options = {});

// The real architectures some installed NVRTC can produce a CUBIN for: "sm_70", ..., "sm_121".
std::vector<std::string> supported_archs();

// The newest installed NVRTC's version, "major.minor" ("13.0"); "none" when none is found.
std::string nvrtc_version();

// The version of the NVRTC that compiles for `arch` ("12.9" for sm_70 where 12.9 and 13.0
// are installed); "" when none targets it.
std::string nvrtc_version_for(const std::string& arch);

// The exact option list compile_cuda passes to NVRTC (exposed for the cache key, the
// `codegen` command's compile reports and for reading).
std::vector<std::string> nvrtc_options(const std::string& arch, const CompileOptions& options);

// Key of the compile cache (issue 5): 16 hex digits, FNV-1a 64 over the source, the arch,
// the NVRTC option list, keep_ptx and the version of the NVRTC that compiles for `arch`. Two compiles with equal keys
// produce the same CUBIN.
std::string compile_cache_key(const std::string& source, const std::string& arch,
                              const CompileOptions& options = {});

// Spill stores plus spill loads, in bytes per thread, over `kernels`.
int spilled_bytes(const std::vector<KernelResources>& kernels);

// Whether a spilling compile under `options` is to be compiled again with
// min_blocks_per_sm = 1 (CompileOptions::retry_spills, and no register bound set).
bool retries_spills(const CompileOptions& options);

// The same options with min_blocks_per_sm = 1 and no further retry: the second compile.
CompileOptions spill_retry_options(const CompileOptions& options);

// Reads ptxas's `-v` lines out of an NVRTC log (exposed for tests); entries in log order.
std::vector<KernelResources> parse_ptxas_info(const std::string& log);

}  // namespace dc
