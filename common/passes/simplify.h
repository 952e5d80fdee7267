// The simplification pipeline: a straight list of passes, each logged with node counts
// before and after and timed (after Halide's lower_impl).
#pragma once

#include "ir/graph.h"

namespace dc {

struct SimplifyOptions {
  bool fold_batch_norm = true;
  bool fuse_layer_norm = true;
  bool fuse_rms_norm = true;
  bool fuse_sibling_matmuls = true;
  bool interleave_glu_weights = true;  // after fuse_sibling_matmuls
  bool fuse_gelu = true;
};

Graph simplify(Graph g, const SimplifyOptions& opts = {});

}  // namespace dc
