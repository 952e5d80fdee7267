// Reading and writing a plan directory (docs/plan-format.md):
//   DIR/plan.json   format "dc-plan/1": everything of ExecPlan but kernel text and weights,
//                   plus the size and FNV-1a 64 checksum of the two other files
//   DIR/kernels.cu  the prelude once, then every module's source with the prelude replaced
//                   by one marker line; plan.json gives each module's byte range
//   DIR/weights.bin weight bytes at kPlanAlignment-aligned offsets
// read_plan rebuilds each module's source exactly as it was generated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "plan.h"

namespace dc {

// weights.bin and what plan.json says about it.
struct WeightsFile {
  std::string path;
  int64_t bytes = 0;
  std::string fnv1a;
};

// Writes the three files into `dir`, whole or not at all: into a staging folder beside it,
// renamed into place (staged_dir.h). An earlier plan at `dir` is replaced; a folder holding
// other files is refused. UserError if the folder cannot be written (disk full: `dir` is
// left as it was). The plan must be valid (validate_plan), or InternalError.
void write_plan(const ExecPlan& plan, const std::string& dir);

// Reads and validates a plan directory. Every problem is a UserError naming the file and
// what is wrong: a missing file, not JSON, another format or a newer version, a missing or
// mistyped field, a truncated or modified kernels.cu / weights.bin (size, checksum), an id
// out of range, a buffer whose dtype/shape disagrees with its module. Never a crash.
//
// With `unverified_weights`, weights.bin's size and ranges are checked but its checksum is
// not: the file is not read here, and *unverified_weights says what the runtime's backend
// must find when it reads it, once, as it uploads (stream_weights_file).
ExecPlan read_plan(const std::string& dir, WeightsFile* unverified_weights = nullptr);

// Reads the whole of f.path front to back in chunks of at most `chunk` bytes, handing each
// to sink(file offset, bytes, count) and checksumming it. UserError naming the file if it
// cannot be read, has another size, or its checksum differs from f's: thrown after the
// last chunk, so a caller that uploads as it goes must discard what it uploaded.
void stream_weights_file(const WeightsFile& f, size_t chunk,
                         const std::function<void(uint64_t, const std::byte*, size_t)>& sink);

// Bytes of weights.bin files read so far by this process (read_plan's checksum pass and
// stream_weights_file): tests assert that a plan's weights are read once.
uint64_t weights_bytes_read();

// Structural checks shared by read_plan and write_plan: ids in range, every step binds as
// many tensors as its module has buffers with equal dtype and shape, roles agree with kinds
// (inputs/weights are never written, every intermediate is written before it is read),
// arena offsets within arena_bytes and no two tensors live at the same step overlap,
// weight values present with the right dtype/shape. Throws UserError("<what>: <problem>").
void validate_plan(const ExecPlan& plan, const std::string& what = "plan");

// plan.json's text for a plan (as write_plan writes it; checksums of the given file texts).
std::string plan_json(const ExecPlan& plan, const std::string& kernels_cu,
                      uint64_t weights_bytes, const std::string& weights_fnv1a);

}  // namespace dc
