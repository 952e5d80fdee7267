// The kernel of the AMP step's weight Casts, dc.MultiCast (ir/multi_cast.h): one launch
// casts every weight of the node, the grid sweeping the tensors one after another (their
// extents are compile-time constants, as in the optimizer's kernel, template_optimizer.h),
// each element rounded once to its output's type as the Cast's own kernel stores it
// (store_value). The reference reads one float a thread; the tuned variant (opaque_generic,
// vec 4) a float4 a thread (the buffers start 16-byte aligned: plan offsets and allocations),
// the elements past a tensor's last whole float4 one a thread. No shared memory, barrier or
// atomic: the CUDA source runs as it is on the host emulator and through the OpenCL dialect.
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace dc {

// The kernel's body: a grid-stride loop per tensor. `sub` is the node as a graph of its own
// whose inputs are in0... (the f32 weights) and outputs out0... (their copies), in the
// node's order.
std::string multi_cast_body(const Graph& sub, const Node& n, bool vectorised);

// The threads the body's loops can use: the largest tensor's elements, or its float4s.
int64_t multi_cast_threads_wanted(const Graph& sub, const Node& n, bool vectorised);

}  // namespace dc
