// The front of every pipeline: import an ONNX model and simplify it, timed.
#pragma once

#include <string>

#include "ir/graph.h"
#include "ir/precision.h"
#include "onnx/import.h"

namespace dc::cli {

struct LoadedModel {
  Graph imported;     // as imported (checked, shape-inferred)
  // After the simplification passes (== imported with simplify off) and then
  // apply_precision for the plan's precision (unchanged for fp32/tf32).
  Graph simplified;
  std::vector<std::string> precision_notes;  // constants clamped by apply_precision
  std::vector<std::string> training_notes;   // --train: the step's ops, what is recomputed
  double import_seconds = 0;
  double simplify_seconds = 0;   // the simplification passes
  double precision_seconds = 0;  // apply_precision
};

LoadedModel load_model(OnnxModel model, const ImportOptions& opts, bool simplify,
                       Precision precision = Precision::fp32);

}  // namespace dc::cli
