// The kernel of fp16's overflow check, dc.NonFiniteCheck (ir/nonfinite_check.h): one launch
// over every gradient the node reads, lane f (a thread) reading elements f, f + F, ... of
// each tensor in turn and writing flags[f]. No shared memory, barrier or atomic: the CUDA
// source runs as it is on the host emulator and through the OpenCL dialect.
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace dc {

// The kernel's body: a grid-stride loop over the lanes. `sub` is the node as a graph of its own
// whose inputs are in0... (the gradients) and whose output is out0 (the flags).
std::string nonfinite_check_body(const Graph& sub, const Node& n);

// The threads the body can use: one a lane.
int64_t nonfinite_check_threads_wanted(const Node& n);

}  // namespace dc
