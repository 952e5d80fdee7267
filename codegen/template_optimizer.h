// The fused multi-tensor optimizer kernel (docs/training.md, "Optimizers"): one launch updates
// every tensor of a dc.SgdUpdate / dc.AdamWUpdate node (a bucket, ir/optimizer_update.h),
// reading each element of W, G and the state once and writing every output from the same
// registers. It is PyTorch's multi_tensor_apply without its chunk table: the tensors' extents
// are compile-time constants, so a thread finds its tensor by comparing its index with their
// running offsets. The math follows common/ref/ops_training.cpp step for step (AdamW in
// double, SGD in float), so the kernel is its own reference and "opaque_generic" variant.
#pragma once

#include <string>

#include "ir/graph.h"

namespace dc {

// The kernel's body: a grid-stride loop over updated_elements (ir/optimizer_update.h). `sub` is the node as a
// graph of its own whose inputs are in0... and outputs out0... in the node's order.
std::string optimizer_update_body(const Graph& sub, const Node& n);

}  // namespace dc
