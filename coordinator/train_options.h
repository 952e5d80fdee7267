// The `--train` options of plan, codegen, tune and verify (docs/training.md, "Interface"),
// and loading a model as its training-step graph.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include <boost/program_options.hpp>

#include "model_loader.h"
#include "passes/training_spec.h"
#include "plan/plan.h"
#include "plan_estimate.h"

namespace dc::cli {

// --train, --loss, --labels, --optimizer, --lr, --momentum, --weight-decay, --betas, --eps,
// --freeze, --no-recompute, --optimizer-bucket-mib, --train-attention.
void add_training_options(boost::program_options::options_description& desc);

// The TrainingSpec of the parsed flags; nullopt without --train. UserError for a training
// option given without --train and for values out of range (messages name the flag).
std::optional<TrainingSpec> read_training_options(const boost::program_options::variables_map& vm);

// A whole step's estimate: (GPU type's name, seconds); plan_by_estimate on one GPU type.
using StepEstimate = std::function<std::pair<std::string, double>(const Graph&)>;

// import -> simplify_for_training -> build_training_graph -> apply_precision; fp16/bf16 build
// the mixed-precision step (passes/training/mixed_precision.h). `simplified` is the training graph.
// With --train-attention auto (the default) and `estimate`, a step whose attention fuses is
// built op by op too, and the one with the lower estimate is kept (a training note says
// which); without `estimate` (verify --train) auto fuses.
LoadedModel load_training_model(OnnxModel model, const ImportOptions& opts, const TrainingSpec& spec,
                                Precision precision, const StepEstimate& estimate = {});

// The estimate of a step on `gpu`, for load_training_model.
StepEstimate step_estimate(const GpuSpec* gpu, const PlanOptions& opts);

// plan's note on a training graph: node counts and the dc-internal training ops, which no
// tuned template covers yet: each runs as its naive kernel (opaque_generic), one thread per
// output element (codegen/template_reference_training.h).
std::string training_plan_note(const Graph& g);

// What a training plan records of `spec` (plan.json's "training"): loss, labels, optimizer,
// hyper-parameters, the source model's path as given (dc-run --save-weights reads it), and for
// fp16/bf16 the mixed-precision step's dtype and loss scaling.
PlanTraining plan_training(const TrainingSpec& spec, const std::string& model_path, Precision precision);

}  // namespace dc::cli
