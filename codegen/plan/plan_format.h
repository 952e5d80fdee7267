// Internals of the plan directory format (docs/plan-format.md) shared by plan_io.cpp (the
// three files), plan_json.cpp (plan.json both ways) and plan_validate.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan.h"

namespace dc {

// Where a module's source lies in kernels.cu.
struct ModuleSource {
  int64_t offset = 0;      // byte offset of the section text in kernels.cu
  int64_t bytes = 0;       // its length
  int64_t prelude_at = -1; // offset of the prelude marker line in the section; -1: none
};

// Size and FNV-1a 64 checksum (16 hex digits) of one file.
struct FileSum {
  int64_t bytes = 0;
  std::string fnv1a;
};

// What plan.json says about the two other files.
struct PlanFiles {
  std::vector<ModuleSource> sources;  // parallel to ExecPlan::modules
  FileSum kernels;
  FileSum weights;
};

// The line that stands for the prelude in each module section of kernels.cu.
inline constexpr const char* kPreludeMarker = "// [dc prelude: see the top of this file]";

// plan.json's text.
std::string plan_json_text(const ExecPlan& plan, const PlanFiles& files);

// Parses plan.json (everything but sources and weight values). UserError
// "<file>: <field path>: <problem>" for anything malformed.
ExecPlan parse_plan_json(const std::string& text, const std::string& file, PlanFiles* files);

// validate_plan without the weight values: what read_plan checks before it reads weights.bin.
void validate_plan_structure(const ExecPlan& plan, const std::string& what);
// The weight-value half of validate_plan.
void validate_plan_values(const ExecPlan& plan, const std::string& what);

}  // namespace dc
