// dc_op_case_perf: the op-case table's perf mode (docs/testing.md, "The perf mode"). Times the
// reference kernel and the first variant of each pick (of each template, for a pick of every
// template) of every case whose name contains one of the given words (all cases without
// any), on PoCL's CPU device or the first CUDA GPU, and prints the case, precision, median
// time, GFLOP/s (Workload::flops over the median) and kernel.
//
//   dc_op_case_perf --device opencl|cuda [WORD...]
//
// Exit status: 0, 1 when a kernel did not compile or run, 2 for bad arguments or no device.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "gpu_device_testing.h"
#include "op_case_harness.h"
#include "op_cases.h"
#include "pocl_testing.h"

namespace {

constexpr const char* kUsage = "usage: dc_op_case_perf --device opencl|cuda [WORD...]\n";

bool selected(const std::string& name, const std::vector<std::string>& words) {
  if (words.empty()) return true;
  for (const auto& w : words)
    if (name.find(w) != std::string::npos) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device;
  std::vector<std::string> words;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) device = argv[++i];
    else if (a == "-h" || a == "--help") return std::cout << kUsage, 0;
    else if (a.rfind("--", 0) == 0) return std::cerr << "error: unknown option " << a << "\n" << kUsage, 2;
    else words.push_back(a);
  }
  dc::testing::CaseDevice d;
  if (device == "opencl") {
    if (!dc::cl().device) return std::cerr << "error: no PoCL CPU device (pocl-opencl-icd)\n", 2;
    d = dc::pocl_case_device();
  } else if (device == "cuda") {
    if (!dc::gpu().device) return std::cerr << "error: no CUDA device: " << dc::gpu().why << "\n", 2;
    d = dc::cuda_case_device();
  } else {
    return std::cerr << "error: --device opencl or cuda\n" << kUsage, 2;
  }
  std::vector<dc::testing::CaseAt> cases;
  for (const dc::testing::CaseAt& at : dc::testing::op_case_params())
    if (selected(at.c->name, words)) cases.push_back(at);
  if (cases.empty()) return std::cerr << "error: no case name contains any of the words given\n", 2;
  std::printf("%-44s %-5s %13s %16s  %s\n", "case", "dtype", "median", "GFLOP/s", "kernel");
  int failed = 0;
  for (const dc::testing::CaseAt& at : cases) {
    const std::string dtype(dc::dtype_name(at.storage));
    for (const dc::testing::CaseTiming& t : dc::testing::time_op_case(*at.c, at.storage, d)) {
      if (!t.error.empty()) {
        std::cerr << "error: " << at.c->name << " " << dtype << " " << t.kernel << ": " << t.error << "\n";
        ++failed;
        continue;
      }
      std::printf("%-44s %-5s %10.1f us %16.3f  %s\n", at.c->name.c_str(), dtype.c_str(), t.median_us, t.gflops,
                  t.kernel.c_str());
    }
  }
  return failed > 0 ? 1 : 0;
}
