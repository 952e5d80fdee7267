// PoCL's CPU device for the OpenCL tests (test_opencl_kernels.cpp, test_opencl_op_cases.cpp)
// and the op cases' perf tool: opened once per process, with the clang that compiles for it
// and its parameter space.
#pragma once

#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <string>

#include "gpu/gpu_catalog.h"
#include "opencl_compile.h"
#include "op_case_harness.h"
#include "opencl_device.h"
#include "opencl_dialect.h"
#include "opencl_runner.h"

namespace dc {

// PoCL's CPU device, opened once per process. A machine without it fails these tests: CI
// installs PoCL (scripts/install-deps.sh), and the label says they need it.
struct Cl {
  std::unique_ptr<ocl::Device> device;
  std::string clang;
  GpuSpec spec;
};

inline const Cl& cl() {
  static const Cl* const c = [] {
    auto* out = new Cl;
    const GpuCatalog catalog = GpuCatalog::builtin();
    std::string why;
    for (const auto& d : ocl::list_devices(catalog, &why))
      if (d.gpu_type == "pocl-cpu") {
        out->device = std::make_unique<ocl::Device>(catalog, d.index);
        out->clang = opencl_clang_for(d.platform_version);
        out->spec = catalog.require("pocl-cpu");
        std::cout << "OpenCL " << ocl::describe(d) << ", " << out->clang << "\n";
        break;
      }
    return out;
  }();
  return *c;
}

#define DC_REQUIRE_POCL() ASSERT_TRUE(cl().device) << "no PoCL CPU device (pocl-opencl-icd)"

inline std::string pocl_cache() { return ::testing::TempDir() + "dc-opencl-test-cache"; }

// The op-case harness's device (op_case_harness.h): PoCL through the dialect layer and clang.
inline testing::CaseDevice pocl_case_device() {
  testing::CaseDevice d;
  d.name = "OpenCL pocl-cpu";
  d.spec = cl().spec;
  d.compile = [](const GeneratedKernel& k, std::string* error) {
    const OpenClCompileResult r = compile_opencl(opencl_source(k), cl().clang, pocl_cache());
    if (!r.ok) *error = r.error;
    return r.binary;
  };
  d.run = [](const GeneratedKernel& k, const std::vector<char>& spir, std::vector<Tensor>& buffers) {
    return run_on_opencl(*cl().device, k, spir, buffers);
  };
  d.time = [](const GeneratedKernel& k, const std::vector<char>& spir, const std::vector<Tensor>& inputs) {
    TimingOptions o;
    o.min_samples = 5;
    o.min_total_ms = 5;
    return time_on_opencl(*cl().device, k, spir, inputs, o);
  };
  d.max_per_pick = 1;  // PoCL builds each kernel for the CPU: the first variant of each pick
  return d;
}

}  // namespace dc
