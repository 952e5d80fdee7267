// The fused multi-tensor optimizer kernel (docs/training.md, "The optimizer kernel"): one
// launch updates every tensor of a dc.SgdUpdate / dc.AdamWUpdate node (a bucket,
// ir/optimizer_update.h), reading each element of W, G and the state once and writing every
// output from the same registers. It is PyTorch's multi_tensor_apply without its chunk table:
// the tensors' extents are compile-time constants. The reference kernel walks the bucket one
// element a thread, finding its tensor by comparing its index with their running offsets; the
// tuned ("opaque_generic") kernel sweeps the tensors one after another, a float4 of each input
// a thread. The math follows common/ref/ops_training.cpp step for step (AdamW in double, SGD
// in float).
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"
#include "ir/kernel.h"

namespace dc {

// The kernel's body: grid-stride loops over the bucket's elements, one a thread (the reference)
// or a float4 of each a thread (`vectorised`). `sub` is the node as a graph of its own whose
// inputs are in0... and outputs out0... in the node's order.
std::string optimizer_update_body(const Graph& sub, const Node& n, bool vectorised);

// The threads the body's loops can use: updated_elements (ir/optimizer_update.h), or the
// largest tensor's float4s when vectorised.
int64_t optimizer_update_threads_wanted(const Graph& sub, const Node& n, bool vectorised);

// The name generate_naive (template_reference.cpp) gives node `index`'s kernel:
// "ref_n0_dc_sgdupdate" in the reference template, "naive_n0_dc_sgdupdate" in opaque_generic.
std::string naive_kernel_name(const std::string& template_name, size_t index, const std::string& op);

// True for a module that is one optimizer update node's kernel (its only launch is the loops
// of optimizer_update_body): each thread reads element e of every input of a tensor's group
// into registers before it writes element e of that group's outputs (a float4's four
// elements, in the vectorised loop), and reads no other element of them. So W' may share W's bytes, and each state's next value the state's: the plan's
// in-place state updates (plan/state_alias.h) are allowed only in such a module.
bool is_optimizer_update_kernel(const GeneratedKernel& k);

}  // namespace dc
