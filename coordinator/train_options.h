// The `--train` options of plan, codegen, tune and verify (docs/training.md, "Interface"),
// and loading a model as its training-step graph.
#pragma once

#include <optional>

#include <boost/program_options.hpp>

#include "model_loader.h"
#include "passes/training_spec.h"

namespace dc::cli {

// --train, --loss, --labels, --optimizer, --lr, --momentum, --weight-decay, --betas, --eps,
// --freeze.
void add_training_options(boost::program_options::options_description& desc);

// The TrainingSpec of the parsed flags; nullopt without --train. UserError for a training
// option given without --train and for values out of range (messages name the flag).
std::optional<TrainingSpec> read_training_options(const boost::program_options::variables_map& vm);

// import -> simplify_for_training -> build_training_graph -> apply_precision (fp32/tf32 only
// for now: mixed-precision training is not implemented). `simplified` is the training graph.
LoadedModel load_training_model(OnnxModel model, const ImportOptions& opts,
                                const TrainingSpec& spec, Precision precision);

// plan's note on a training graph: node counts and the dc-internal training ops, which no
// template covers yet and which the candidate pipeline therefore treats as opaque
// singletons (estimated as the naive opaque_generic kernel).
std::string training_plan_note(const Graph& g);

// UserError for `command` (codegen, tune) on a training graph while the device kernels of
// its dc-internal ops do not exist yet (docs/training.md, "Not done yet").
void require_training_kernels(const Graph& g, const char* command);

}  // namespace dc::cli
