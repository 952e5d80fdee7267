// Fresh seeded random inputs for a workload, the values every measured variant and its
// reference kernel run on (never zeros: an all-zero input hides missing terms). Floats are
// uniform in [-1, 1); integer inputs read as Gather/GatherElements indices are uniform over
// the indexed dimension, other integers are 0 or 1; bools are 0 or 1.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/tensor.h"
#include "ir/workload.h"

namespace dc {

// One tensor per workload graph input, in graph input order. The same seed gives the same
// values on every machine (std::mt19937 and integer arithmetic only; floats through a fixed
// scaling, not std::uniform_real_distribution, whose output is implementation-defined).
std::vector<Tensor> random_workload_inputs(const Workload& w, uint32_t seed);

}  // namespace dc
