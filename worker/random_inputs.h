// Fresh seeded random inputs for a workload, the values every measured variant and its
// reference kernel run on (never zeros: an all-zero input hides missing terms). Floats are
// uniform in [-1, 1); integer inputs read as indices are uniform over the indexed extent
// (ir/index_bounds.h), other integers are 0 or 1; bools are 0 or 1.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/tensor.h"
#include "ir/workload.h"

namespace dc {

// What one random input is: its type and shape, and for an integer read as indices the
// exclusive upper bound of its values (0: not an index, values 0 or 1).
struct RandomInput {
  DType dtype = DType::undefined;
  Shape shape;
  int64_t index_bound = 0;
};

// One tensor per input, in order. The worker calls this with what the Job carries.
std::vector<Tensor> random_inputs(const std::vector<RandomInput>& inputs, uint32_t seed);

// The RandomInputs of a workload's graph inputs (bounds from input_index_bounds).
std::vector<RandomInput> workload_random_inputs(const Workload& w);

// random_inputs(workload_random_inputs(w), seed): one tensor per workload graph input, in graph input order. The same seed gives the same
// values on every machine (std::mt19937 and integer arithmetic only; floats through a fixed
// scaling, not std::uniform_real_distribution, whose output is implementation-defined).
std::vector<Tensor> random_workload_inputs(const Workload& w, uint32_t seed);

}  // namespace dc
