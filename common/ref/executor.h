// The CPU reference executor: runs any imported Graph in node order and is the
// correctness oracle for everything later (generated kernels, plans).
#pragma once

#include <map>
#include <string>

#include "ir/graph.h"
#include "ref/kernel.h"

namespace dc::ref {

using TensorMap = std::map<std::string, Tensor>;

struct RunOptions {
  // Also return every intermediate tensor, not only the graph outputs.
  bool keep_intermediates = false;
};

// Runs `g` on `inputs` (one value per graph input, matching dtype and shape: UserError
// otherwise) and returns the graph outputs by name. Frees intermediates after their last use.
TensorMap run_graph(const Graph& g, const TensorMap& inputs, const RunOptions& opts = {});

// Runs one node on the given input values (used by constant folding and tests). Float
// inputs of any float dtype are read as their values and the op computes in f32 (f64 when
// f64 is involved); each float output is rounded to nearest even to its dtype in
// `out_dtypes` (the graph's declared dtypes; run_graph passes them). Without them, an op
// whose first float input is f16/bf16 stores its float outputs in that dtype.
std::vector<Tensor> run_node(const Node& node, const Inputs& inputs);
std::vector<Tensor> run_node(const Node& node, const Inputs& inputs,
                             const std::vector<DType>& out_dtypes);

}  // namespace dc::ref
