// PoCL's CPU device for the OpenCL tests (test_opencl_kernels.cpp, test_opencl_op_cases.cpp):
// opened once per process, with the clang that compiles for it and its parameter space.
#pragma once

#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <string>

#include "gpu/gpu_catalog.h"
#include "opencl_compile.h"
#include "opencl_device.h"

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

}  // namespace dc
