// Folds constant zero padding into the convolution that reads it: Pad -> Conv becomes one
// Conv whose pads are the sum, so the padded tensor is never written and the conv's loads
// read zero where the Pad would have (the implicit-GEMM gather skips those taps).
#pragma once

#include "ir/graph.h"

namespace dc {

// For every Conv (auto_pad NOTSET or VALID) whose data input is the output of a Pad read by
// that Conv alone: constant mode with fill 0, constant non-negative pads on the spatial
// axes only. The Conv reads the Pad's input with its pads increased; the Pad, now dead, is
// left for eliminate_dead_nodes.
Graph fuse_pad_conv(Graph g);

}  // namespace dc
