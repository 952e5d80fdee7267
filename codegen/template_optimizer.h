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
#include "ir/kernel.h"

namespace dc {

// The kernel's body: a grid-stride loop over updated_elements (ir/optimizer_update.h). `sub` is the node as a
// graph of its own whose inputs are in0... and outputs out0... in the node's order.
std::string optimizer_update_body(const Graph& sub, const Node& n);

// The name generate_naive (template_reference.cpp) gives node `index`'s kernel:
// "ref_n0_dc_sgdupdate" in the reference template, "naive_n0_dc_sgdupdate" in opaque_generic.
std::string naive_kernel_name(const std::string& template_name, size_t index, const std::string& op);

// True for a module that is one optimizer update node's kernel (its only launch is the loop of
// optimizer_update_body): each thread reads element e of every input of a tensor's group into
// registers before it writes element e of that group's outputs, and reads no other element
// of them. So W' may share W's bytes, and each state's next value the state's: the plan's
// in-place state updates (plan/state_alias.h) are allowed only in such a module.
bool is_optimizer_update_kernel(const GeneratedKernel& k);

}  // namespace dc
