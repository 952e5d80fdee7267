// The one table of op cases that the kernel tests run (after ggml's test-backend-ops): each
// case builds its workload (one op, or a small fused graph, with its shapes) at each of its
// storage precisions, says which kernels run (the reference kernel, variants picked from the
// device's parameter space, hand-built variants), and knows its error bound (bitwise, or
// docs/precision.md's model through variant_tolerance) and its FLOPs (Workload::flops).
// op_case_harness.h runs a case on a device: the host emulator (dc_unit_tests), PoCL
// (dc_opencl_tests) and a CUDA GPU (dc_gpu_tests). docs/testing.md, "The op-case table".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "ir/kernel.h"
#include "ir/workload.h"
#include "ref/executor.h"
#include "variant.h"

namespace dc::testing {

// Which variants of a workload run: those `accept` takes (null: any), at most `max` of them
// spread over the space's order; per_template: up to `max` of each template; middle: the one
// variant in the middle of the space (max is then 1).
struct VariantPick {
  std::function<bool(const Variant&)> accept;
  size_t max = 1;
  bool per_template = false;
  bool middle = false;
  // A device without such a variant is no failure (the model sweeps: not every workload
  // has a template of its own).
  bool required = true;
  // What each picked kernel's source and launches must show: "" or what they lack.
  std::function<std::string(const Variant&, const GeneratedKernel&)> source_check;
};

// One workload of a case and the kernels that run on it.
struct CasePart {
  std::string label;               // within the case: "row length 64"; "" for the only part
  Workload w;
  ref::TensorMap inputs;           // by workload input name (seeded random, never zeros)
  bool reference_kernel = true;    // generate_reference(w) runs too
  std::vector<VariantPick> picks;
  std::vector<GeneratedKernel> kernels;  // hand-built variants
  bool exact = false;              // every output equals the CPU reference bit for bit
  int64_t reduction_length = 0;    // > 0: the error model's K (variant_tolerance) must be this
  std::set<std::string> templates; // each runs at least one kernel here (strict devices)
};

struct OpCase {
  std::string name;                // the op(s) and the shape: "softmax_scale_2x4x7x96"
  std::vector<DType> storage;      // the precisions it runs at (tensor storage; fp32 math)
  std::function<std::vector<CasePart>(DType storage)> build;
  std::set<std::string> templates; // each runs at least one kernel over all parts (strict)
};

// The table, in a fixed order.
const std::vector<OpCase>& op_cases();

// A case at one of its precisions: the parameter of the table's gtests.
struct CaseAt {
  const OpCase* c = nullptr;
  DType storage = DType::f32;
};
std::vector<CaseAt> op_case_params();
// "softmax_scale_2x4x7x96_f16": a gtest name (letters, digits and '_').
std::string op_case_test_name(const CaseAt& at);
// Test names and ctest entries show the case's name, not its bytes.
void PrintTo(const CaseAt& at, std::ostream* os);

// ---- building workloads (shared with the source-text tests) --------------------------

// Random values of a tensor's type: floats uniform in [lo, hi) rounded to the dtype, integers
// in [0, int_hi), bools 0/1; never all zeros.
Tensor random_value(const TensorInfo& info, uint32_t seed, float lo = -1.f, float hi = 1.f,
                    int64_t int_hi = 2);

// random_value for every graph input of `g` (of its dtype), seeds from `seed` up.
ref::TensorMap random_inputs_of(const Graph& g, uint32_t seed);

// Random f32 values for every graph input of `g`, seeds from `seed` up.
ref::TensorMap random_graph_inputs(const Graph& g, uint32_t seed, float lo = -1.f, float hi = 1.f);

// The whole graph as one workload of `kind`, its tensors typed by running it on `values` (its
// inputs); `in` receives the workload's input values (initializers for constant slots).
Workload workload_of(Graph g, const ref::TensorMap& values, ClusterKind kind, ref::TensorMap* in);

// `g` (built with f32 tensors) with the storage dtypes of `dtypes` (initializers converted),
// every other tensor typed by running it, as the precision pass would.
Graph retyped(Graph g, const std::map<std::string, DType>& dtypes);

// The whole (typed) graph as one workload of `kind`, with fresh inputs of each input's dtype.
Workload whole(const Graph& g, ClusterKind kind, uint32_t seed, ref::TensorMap* in,
               float lo = -1.f, float hi = 1.f);

// The table's parts: op_cases_fp32.cpp (f32 storage), op_cases_storage.cpp (f16/bf16).
void add_fp32_cases(std::vector<OpCase>* table);
void add_storage_cases(std::vector<OpCase>* table);

}  // namespace dc::testing
