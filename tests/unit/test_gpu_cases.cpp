// Every workload the GPU kernel tests name still exists in its example model: those tests run
// only on a lent GPU, so a case that fusion changed away must fail here first.
#include <gtest/gtest.h>

#include "../gpu/gpu_cases.h"

namespace dc {
namespace {

TEST(GpuCases, EveryCaseNamesACandidateOfItsModel) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Workload w = find_workload(c);
    EXPECT_FALSE(w.graph.nodes.empty()) << c.name << ": no compute nodes";
  }
}

}  // namespace
}  // namespace dc
