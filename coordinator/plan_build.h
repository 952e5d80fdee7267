// From a selection to an execution plan (codegen/plan/plan.h): the chosen clusters in
// topological order, one module per distinct (workload, variant) kernel, the tensors bound
// to each step's buffers, weights, and the liveness-based memory plan of intermediates and
// scratch (codegen/plan/memory_plan.h). The kernels are those the farm measured: generated
// again from the (workload, variant) pair, which is deterministic.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "candidates.h"
#include "estimator.h"
#include "gpu/gpu_spec.h"
#include "plan/plan.h"
#include "plan_estimate.h"
#include "tune.h"
#include "variant.h"

namespace dc {

// One cluster of the cover and the kernel that computes it.
struct StepChoice {
  size_t candidate = 0;            // index into the candidate list
  std::optional<Variant> variant;  // nullopt: the workload's reference kernel
  double measured_us = 0;
  double estimated_us = 0;
};

// What the plan records about where it came from.
struct PlanOrigin {
  std::string model_name;
  std::string model_sha256;
  const GpuSpec* gpu = nullptr;
  std::string nvrtc_version;     // "" = the NVRTC that compiles for the GPU type here
  bool emulated = false;
  Precision precision = Precision::fp32;  // of the graph (apply_precision ran for it)
  std::vector<std::string> weight_transforms;
  // A training step's graph (passes/build_training_graph.h): what was trained and how
  // (loss, optimizer, hyper-parameters, source model); assemble_plan adds the state pairs.
  std::optional<PlanTraining> training;
};

// The plan of `choices` (a cover: every node of `g` in exactly one chosen candidate) over
// the simplified graph `g`. UserError for a graph dc cannot run as a plan (a model output
// that no kernel computes: an input or a constant passed straight through).
ExecPlan assemble_plan(const Graph& g, const std::vector<Candidate>& candidates,
                       const std::vector<StepChoice>& choices, const PlanOrigin& origin);

// The plan of one GPU type of a tune: its measured selection (reference kernels where a
// cluster has no successful measurement). UserError if the GPU type has no selection.
ExecPlan build_tuned_plan(const TuneResult& r, const GpuTuneResult& g);

// A plan without measurements: the least-estimate cover and each cluster's best-estimated
// variant (what `plan` prints), for tests and for a first look before tuning.
// `reference_only`: every node alone with its reference kernel instead.
ExecPlan build_estimated_plan(const Graph& simplified, const GpuSpec& gpu,
                              const PlanOptions& opts = {}, bool reference_only = false);
// The same from an estimate already made (`plan --out`): GPU type `gpu_index` of `mp`.
// `training`: a training step's description (PlanOrigin::training), nullptr for inference.
ExecPlan build_estimated_plan(const Graph& simplified, const ModelPlan& mp, size_t gpu_index,
                              const PlanOptions& opts, const PlanTraining* training = nullptr);

// "BatchNormalization x53 folded into Conv weights", ...: the rewrites simplification made,
// from the op counts of the imported and the simplified graph.
std::vector<std::string> describe_weight_transforms(const Graph& imported, const Graph& simplified);

}  // namespace dc
