#include "op_cases.h"

#include <gtest/gtest.h>

#include <random>

#include "ref/storage_dtypes.h"
#include "testing.h"

namespace dc::testing {

Tensor random_value(const TensorInfo& info, uint32_t seed, float lo, float hi, int64_t int_hi) {
  if (is_float(info.dtype)) return ref::convert_float(random_tensor(info.shape, seed, lo, hi), info.dtype);
  std::mt19937 rng(seed);
  Tensor t(info.dtype, info.shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = static_cast<int64_t>(rng() % static_cast<uint32_t>(int_hi));
    switch (info.dtype) {
      case DType::i64: t.mutable_data<int64_t>()[i] = v; break;
      case DType::i32: t.mutable_data<int32_t>()[i] = static_cast<int32_t>(v); break;
      case DType::boolean: t.mutable_data<bool>()[i] = (v & 1) != 0; break;
      default: ADD_FAILURE() << "no random values for " << dtype_name(info.dtype);
    }
  }
  return t;
}

ref::TensorMap random_graph_inputs(const Graph& g, uint32_t seed, float lo, float hi) {
  ref::TensorMap v;
  for (const auto& name : g.inputs) v[name] = random_tensor(g.info(name).shape, seed++, lo, hi);
  return v;
}

ref::TensorMap random_inputs_of(const Graph& g, uint32_t seed) {
  ref::TensorMap in;
  for (const auto& name : g.inputs) in[name] = random_value(g.info(name), seed++);
  return in;
}

namespace {

std::vector<size_t> every_node(const Graph& g) {
  std::vector<size_t> all(g.nodes.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

}  // namespace

Workload workload_of(Graph g, const ref::TensorMap& values, ClusterKind kind, ref::TensorMap* in) {
  ref::RunOptions opts;
  opts.keep_intermediates = true;
  for (const auto& [name, t] : ref::run_graph(g, values, opts)) g.tensors[name] = TensorInfo{t.dtype(), t.shape()};
  Workload w = make_workload(g, every_node(g), kind);
  in->clear();
  for (size_t i = 0; i < w.graph.inputs.size(); ++i) {
    const std::string& src = w.source_inputs[i];
    (*in)[w.graph.inputs[i]] = values.count(src) ? values.at(src) : g.initializers.at(src);
  }
  return w;
}

Graph retyped(Graph g, const std::map<std::string, DType>& dtypes) {
  for (const auto& [name, t] : dtypes) {
    g.tensors[name].dtype = t;
    if (auto w = g.initializers.find(name); w != g.initializers.end()) w->second = ref::convert_float(w->second, t);
  }
  ref::TensorMap in;
  uint32_t seed = 1;
  for (const auto& name : g.inputs) in[name] = random_value(g.info(name), seed++);
  ref::RunOptions keep;
  keep.keep_intermediates = true;
  for (const auto& [name, t] : ref::run_graph(g, in, keep)) g.tensors[name] = {t.dtype(), t.shape()};
  return g;
}

Workload whole(const Graph& g, ClusterKind kind, uint32_t seed, ref::TensorMap* in, float lo, float hi) {
  Workload w = make_workload(g, every_node(g), kind);
  in->clear();
  for (size_t i = 0; i < w.graph.inputs.size(); ++i) {
    const std::string& src = w.source_inputs[i];
    (*in)[w.graph.inputs[i]] = g.is_constant(src) ? g.initializers.at(src) : random_value(g.info(src), seed++, lo, hi);
  }
  return w;
}

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> table = [] {
    std::vector<OpCase> t;
    add_fp32_cases(&t);
    add_storage_cases(&t);
    return t;
  }();
  return table;
}

std::vector<CaseAt> op_case_params() {
  std::vector<CaseAt> out;
  for (const OpCase& c : op_cases())
    for (DType s : c.storage) out.push_back({&c, s});
  return out;
}

void PrintTo(const CaseAt& at, std::ostream* os) { *os << op_case_test_name(at); }

std::string op_case_test_name(const CaseAt& at) { return at.c->name + "_" + std::string(dtype_name(at.storage)); }

}  // namespace dc::testing
