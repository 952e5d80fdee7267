// The load stage: import, simplify and apply the plan's precision through model_loader,
// the front every command shares; three stage lines (precision only when not fp32).
#include <fmt/format.h>

#include "model_loader.h"
#include "train_options.h"
#include "plan_build.h"
#include "tune_stages.h"

namespace dc::tune_stage {

LoadedGraph load(const std::string& model_path, const TuneOptions& opts, StageLog& log) {
  const auto t0 = Clock::now();
  OnnxModel onnx = load_onnx(model_path);
  const double read_seconds = seconds_since(t0);
  const Precision p = opts.plan.precision;
  cli::LoadedModel m = opts.training
                           ? cli::load_training_model(std::move(onnx), opts.import, *opts.training, p,
                                                      cli::step_estimate(opts.gpus.at(0), opts.plan))
                           : cli::load_model(std::move(onnx), opts.import, /*simplify=*/true, p);
  log.record("import", read_seconds + m.import_seconds,
             fmt::format("{}: {} nodes", model_path, m.imported.nodes.size()));
  log.record("simplify", m.simplify_seconds,
             fmt::format("{} nodes{}", m.simplified.nodes.size(), opts.training ? " (the training step)" : ""));
  LoadedGraph out;
  // apply_precision adds no nodes: the op counts are the simplified graph's.
  out.weight_transforms = opts.training
                              ? m.training_notes
                              : describe_weight_transforms(m.imported, m.simplified);
  if (p != Precision::fp32) {
    log.record("precision", m.precision_seconds, std::string(precision_name(p)));
    if (storage_dtype(p) != DType::f32)
      out.weight_transforms.push_back(fmt::format(
          "weights stored in {} (converted once, after BatchNorm folding in fp32)",
          dtype_name(storage_dtype(p))));
    for (auto& n : m.precision_notes) out.weight_transforms.push_back(std::move(n));
  }
  out.graph = std::move(m.simplified);
  return out;
}

}  // namespace dc::tune_stage
