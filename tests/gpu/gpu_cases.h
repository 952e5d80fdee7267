// The workloads of the example models that the GPU kernel tests run (test_gpu_kernels.cpp),
// in a header so that a CPU test (tests/unit/test_gpu_cases.cpp) finds each one in CI: a
// pattern that fusion no longer produces fails there, not first on a lent GPU.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "candidates.h"
#include "onnx/import.h"
#include "passes/simplify.h"
#include "testing.h"

namespace dc {

struct Case {
  const char* name;     // test name
  const char* model;    // examples/<model>/model.onnx
  ClusterKind kind;
  const char* pattern;  // Candidate::pattern; "" = the first candidate of the kind
};

inline const Case kCases[] = {
    {"conv_add_relu", "tiny_cnn", ClusterKind::conv, "conv+add+relu"},
    {"depthwise_conv", "tiny_cnn", ClusterKind::depthwise, "conv"},
    {"relu_maxpool", "tiny_cnn", ClusterKind::reduction, "relu+maxpool"},
    {"gemm", "tiny_cnn", ClusterKind::gemm, "gemm"},
    {"matmul_add_gelu", "tiny_transformer", ClusterKind::gemm, "matmul+add+gelu"},
    {"layernorm", "tiny_transformer", ClusterKind::reduction, "layernorm"},
    {"softmax", "tiny_transformer", ClusterKind::reduction, "softmax"},
    {"attention", "tiny_transformer", ClusterKind::attention, ""},
    // The attention mask's arithmetic; the residual add+reshape+transpose chain that was
    // here is fused into its GEMM now.
    {"elementwise", "tiny_transformer", ClusterKind::elementwise, "cast+sub+mul"},
};

// Test names and ctest entries show the case's name, not its bytes.
inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

inline Workload find_workload(const Case& c) {
  const Graph g = simplify(
      import_onnx_file(testing::source_dir() + "/examples/" + c.model + "/model.onnx"));
  const auto candidates = generate_candidates(g);
  const WorkloadSet set = dedupe_workloads(g, candidates);
  for (size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i].kind == c.kind && (*c.pattern == 0 || candidates[i].pattern == c.pattern))
      return set.workloads[set.candidate_workload[i]];
  ADD_FAILURE() << "no " << cluster_kind_name(c.kind) << " candidate '" << c.pattern << "' in "
                << c.model;
  return {};
}

}  // namespace dc
