// Reading and writing a plan directory (docs/plan-format.md):
//   DIR/plan.json   format "dc-plan/1": everything of ExecPlan but kernel text and weights,
//                   plus the size and FNV-1a 64 checksum of the two other files
//   DIR/kernels.cu  the prelude once, then every module's source with the prelude replaced
//                   by one marker line; plan.json gives each module's byte range
//   DIR/weights.bin weight bytes at kPlanAlignment-aligned offsets
// read_plan rebuilds each module's source exactly as it was generated.
#pragma once

#include <cstdint>
#include <string>

#include "plan.h"

namespace dc {

// Writes the three files into `dir`, whole or not at all: into a staging folder beside it,
// renamed into place (staged_dir.h). An earlier plan at `dir` is replaced; a folder holding
// other files is refused. UserError if the folder cannot be written (disk full: `dir` is
// left as it was). The plan must be valid (validate_plan), or InternalError.
void write_plan(const ExecPlan& plan, const std::string& dir);

// Reads and validates a plan directory. Every problem is a UserError naming the file and
// what is wrong: a missing file, not JSON, another format or a newer version, a missing or
// mistyped field, a truncated or modified kernels.cu / weights.bin (size, checksum), an id
// out of range, a buffer whose dtype/shape disagrees with its module. Never a crash.
ExecPlan read_plan(const std::string& dir);

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
