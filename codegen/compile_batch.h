// Compiling many generated kernels for one architecture as one NVRTC program, for the
// compile-everything runs (scripts/compile_kept_variants.sh, docs/bench/compile-all.md): every
// generated source starts with the same prelude, so a batch program holds the prelude once and
// each source's remainder in a namespace of its own, its kernels renamed apart. NVRTC's start-up
// and the prelude's parse are then paid once per batch instead of once per kernel; ptxas still
// allocates registers per entry function, so its figures per kernel are those of a compile of
// the source alone (CompileBatch.FiguresEqualSeparateCompiles checks it).
//
// A batch that does not compile is split in halves until the sources that fail are alone;
// those are compiled as they are, so a failure's log is the source's own. With
// CompileOptions::retry_spills, the sources that spilled are compiled again as a batch of
// their own with min_blocks_per_sm = 1, as compile_cuda retries a source alone.
#pragma once

#include <string>
#include <vector>

#include "ir/kernel.h"
#include "variant.h"
#include "nvrtc.h"

namespace dc {

struct BatchItemResult {
  bool ok = false;
  std::string error;                     // first error lines when !ok
  std::vector<KernelResources> kernels;  // ptxas figures per kernel, under the source's names
  bool batched = true;                   // false: compiled alone (a failure or an odd source)
                                         // (the first compile; see spill_retried)
  bool spill_retried = false;            // figures of the second compile (retry_spills)
};

struct BatchStats {
  int programs = 0;  // NVRTC programs compiled (batches, halves and single sources)
  double seconds = 0;
};

// Results in the order of `kernels`. `arch` as for compile_cuda (UserError if unsupported).
std::vector<BatchItemResult> compile_batch(const std::vector<const GeneratedKernel*>& kernels,
                                           const std::string& arch,
                                           const CompileOptions& options = {},
                                           BatchStats* stats = nullptr);

// The batch program of `kernels` (exposed for tests): the prelude, then per source
// `namespace dc_batch_<i> { ... }` with every launch's kernel renamed `<name>_b<i>`. Sources
// that do not start with the prelude or whose kernels cannot be found are left out; their
// indices are appended to `left_out`.
std::string batch_program(const std::vector<const GeneratedKernel*>& kernels,
                          std::vector<size_t>* left_out);

}  // namespace dc
