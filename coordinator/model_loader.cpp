#include "model_loader.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "passes/apply_precision.h"
#include "passes/simplify.h"
#include "ir/clock.h"

namespace dc::cli {

LoadedModel load_model(OnnxModel model, const ImportOptions& opts, bool simplify,
                       Precision precision) {
  LoadedModel out;
  auto t0 = std::chrono::steady_clock::now();
  out.imported = import_onnx(std::move(model), opts);
  out.import_seconds = seconds_since(t0);
  spdlog::info("imported {} nodes in {:.3f} s", out.imported.nodes.size(), out.import_seconds);
  t0 = std::chrono::steady_clock::now();
  out.simplified = simplify ? dc::simplify(out.imported) : out.imported;
  out.simplify_seconds = seconds_since(t0);
  spdlog::info("simplified to {} nodes in {:.3f} s", out.simplified.nodes.size(),
               out.simplify_seconds);
  t0 = std::chrono::steady_clock::now();
  out.simplified = apply_precision(std::move(out.simplified), precision, &out.precision_notes);
  out.precision_seconds = seconds_since(t0);
  return out;
}

}  // namespace dc::cli
