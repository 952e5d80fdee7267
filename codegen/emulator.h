// The host emulator: runs a GeneratedKernel's CUDA source on the CPU, for correctness only,
// like Triton's interpreter mode. The source is compiled with the host C++ compiler after a
// runtime header (codegen/emulator/dc_emu_runtime.h) that supplies CUDA's built-ins; blocks
// run one after another and the threads of a block are cooperatively scheduled fibers that
// meet at __syncthreads() and warp collectives. Shared memory is poisoned at each block start
// and outputs before the launches, buffers end at guard pages and inputs are read-only, so
// uninitialised reads, out-of-bounds accesses and divergent barriers show up as failures.
// It never measures time. See docs/emulator.md.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ir/tensor.h"
#include "ir/kernel.h"
#include "variant.h"

namespace dc {

struct EmulatorOptions {
  // Host C++ compiler (found through PATH) and its language/optimisation flags; -shared,
  // -fPIC and -fvisibility=hidden are always added.
  std::string compiler = "c++";
  // -fstack-clash-protection probes large frames page by page, so that a thread whose locals
  // outgrow stack_bytes hits its guard page instead of a neighbour's stack.
  std::vector<std::string> flags = {"-std=c++17", "-O1", "-w", "-fno-strict-aliasing",
                                    "-fstack-clash-protection"};
  // Where compiled kernels are kept; "" means default_emulator_cache_dir(). If it cannot be
  // written, a temporary directory is used and removed afterwards.
  std::string cache_dir;
  // Stack of each emulated thread (an overflow is reported, not a crash).
  size_t stack_bytes = 128 * 1024;
};

struct EmulatorResult {
  bool ok = false;
  // Why not: the compiler's message, a deadlock, an out-of-bounds access, a trap, a bad launch
  // configuration, each naming the launch, block and thread.
  std::string error;
  double compile_seconds = 0;  // compiling, or finding the kernel in the cache
  double run_seconds = 0;      // emulating the launches (never a kernel time)
  bool from_cache = false;     // the compiled kernel came from the cache
};

// $XDG_CACHE_HOME/dc/emulator, else $HOME/.cache/dc/emulator, else under the temp directory.
std::string default_emulator_cache_dir();

// The text the emulator compiles: its runtime, then `#line 1 "kernel.cu"` and the source (so
// compiler messages give lines of GeneratedKernel::source).
std::string emulator_source(const GeneratedKernel& kernel);

// Runs kernel.launches in order on `buffers`, where buffers[i] is kernel.buffers[i]: inputs must
// be given; outputs and scratch may be left undefined. On the device, outputs and scratch start
// poisoned (0xff bytes: NaN, -1), or zeroed if zero_init; afterwards buffers[i] of each is a
// new tensor holding its final contents (also when the run failed). A buffer whose dtype or shape differs from its description is an
// InternalError; a kernel bug is a result with ok == false, never a crash.
EmulatorResult emulate(const GeneratedKernel& kernel, std::vector<Tensor>& buffers,
                       const EmulatorOptions& options = {});

}  // namespace dc
