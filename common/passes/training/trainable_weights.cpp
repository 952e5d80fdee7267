#include "passes/training/trainable_weights.h"

#include <string_view>

#include "ir/error.h"

namespace dc {

namespace {

// Inputs that are hyper-parameters or state, never a gradient's destination.
bool never_differentiated(std::string_view op, size_t input) {
  if (input == 0) return false;
  if (op == "BatchNormalization" || op == "dc.BatchNormTrain") return input >= 3;
  return op == "Resize" || op == "Upsample" || op == "Pad" || op == "Clip" || op == "Dropout" ||
         op == "dc.Dropout" || op == "Pow";
}

}  // namespace

std::set<std::string> trainable_weights(const Graph& g, const TrainingSpec& spec) {
  for (const auto& f : spec.freeze)
    DC_USER_CHECK(g.is_constant(f), "--freeze '", f, "' is not an initializer of the model");
  std::set<std::string> out;
  for (const Node& n : g.nodes)
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const std::string& t = n.inputs[i];
      if (t.empty() || !g.is_constant(t) || never_differentiated(n.op, i)) continue;
      if (spec.freeze.count(t) || (spec.parameters && !spec.parameters->count(t))) continue;
      const TensorInfo& info = g.info(t);
      if (is_float(info.dtype) && !info.shape.empty()) out.insert(t);
    }
  return out;
}

}  // namespace dc
