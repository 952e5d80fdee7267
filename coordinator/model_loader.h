// The front of every pipeline: import an ONNX model and simplify it, timed.
#pragma once

#include <string>

#include "ir/graph.h"
#include "onnx/import.h"

namespace dc::cli {

struct LoadedModel {
  Graph imported;     // as imported (checked, shape-inferred)
  Graph simplified;   // after the simplification passes (== imported with simplify off)
  double import_seconds = 0;
  double simplify_seconds = 0;
};

LoadedModel load_model(OnnxModel model, const ImportOptions& opts, bool simplify);

}  // namespace dc::cli
