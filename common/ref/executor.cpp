#include "ref/executor.h"

#include <set>

#include "ir/error.h"
#include "ref/kernel.h"
#include "ref/storage_dtypes.h"

namespace dc::ref {

std::vector<Tensor> run_node(const Node& node, const Inputs& inputs) {
  return run_node(node, inputs, {});
}

std::vector<Tensor> run_node(const Node& node, const Inputs& inputs,
                             const std::vector<DType>& out_dtypes) {
  const OpDef* def = find_op(node.op);
  DC_USER_CHECK(def != nullptr, "op '", node.op, "' (node '", node.name,
                "') is not supported by dc");
  std::vector<Tensor> out;
  try {
    // Kernels compute in f32/f64; storage dtypes are applied around them (storage_dtypes.h).
    out = def->run(node, compute_inputs(node, inputs, out_dtypes));
  } catch (const UserError& e) {
    throw UserError(str_cat("node '", node.name, "' (", node.op, "): ", e.what()));
  }
  DC_INTERNAL_CHECK(out.size() >= node.outputs.size() || node.op == "Split",
                    "kernel for ", node.op, " returned ", out.size(), " outputs, node has ",
                    node.outputs.size());
  out.resize(node.outputs.size());
  round_outputs(out, output_dtypes(node, inputs, out_dtypes));
  return out;
}

TensorMap run_graph(const Graph& g, const TensorMap& inputs, const RunOptions& opts) {
  TensorMap values;
  for (const auto& name : g.inputs) {
    auto it = inputs.find(name);
    DC_USER_CHECK(it != inputs.end(), "no value given for graph input '", name, "'");
    const TensorInfo& want = g.info(name);
    DC_USER_CHECK(it->second.dtype() == want.dtype, "graph input '", name, "' expects dtype ",
                  dtype_name(want.dtype), ", got ", dtype_name(it->second.dtype()));
    DC_USER_CHECK(it->second.shape() == want.shape, "graph input '", name, "' expects shape ",
                  shape_str(want.shape), ", got ", shape_str(it->second.shape()));
    values[name] = it->second;
  }

  // Last use of each intermediate, so that its memory is released as soon as possible.
  std::map<std::string, size_t> last_use;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty()) last_use[in] = i;
  std::set<std::string> keep(g.outputs.begin(), g.outputs.end());

  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& node = g.nodes[i];
    Inputs in;
    in.reserve(node.inputs.size());
    for (const auto& name : node.inputs) {
      if (name.empty()) {
        in.emplace_back();
        continue;
      }
      if (auto it = values.find(name); it != values.end()) {
        in.push_back(it->second);
      } else if (auto w = g.initializers.find(name); w != g.initializers.end()) {
        in.push_back(w->second);
      } else {
        throw_internal_error("node '", node.name, "' reads '", name, "' before it is computed");
      }
    }
    // The graph's declared dtype of each output: the result is rounded to it.
    std::vector<DType> out_dtypes;
    for (const auto& o : node.outputs) {
      auto t = o.empty() ? g.tensors.end() : g.tensors.find(o);
      out_dtypes.push_back(t == g.tensors.end() ? DType::undefined : t->second.dtype);
    }
    auto out = run_node(node, in, out_dtypes);
    for (size_t k = 0; k < node.outputs.size(); ++k)
      if (!node.outputs[k].empty()) values[node.outputs[k]] = std::move(out[k]);
    if (!opts.keep_intermediates)
      for (const auto& name : node.inputs)
        if (!name.empty() && last_use[name] == i && !keep.count(name)) values.erase(name);
  }

  if (opts.keep_intermediates) {
    for (const auto& o : g.outputs)
      if (!values.count(o) && g.initializers.count(o)) values[o] = g.initializers.at(o);
    return values;
  }
  TensorMap out;
  for (const auto& o : g.outputs) {
    if (auto it = values.find(o); it != values.end()) {
      out[o] = it->second;
    } else if (auto w = g.initializers.find(o); w != g.initializers.end()) {
      out[o] = w->second;
    } else {
      throw_internal_error("graph output '", o, "' was never computed");
    }
  }
  return out;
}

}  // namespace dc::ref
