#include "kernel_module.h"

#include <algorithm>
#include <limits>
#include <map>

#include <fmt/format.h>

namespace dc::cuda {

std::string launch_label(const GeneratedKernel& k, size_t launch) {
  return fmt::format("launch {} ({})", launch, k.launches[launch].kernel);
}

LoadedKernel load_functions(const Driver& driver, const GeneratedKernel& k, const std::vector<char>& image) {
  LoadedKernel lk;
  lk.module = load_module(driver, image);
  for (size_t i = 0; i < k.launches.size(); ++i) {
    const Launch& l = k.launches[i];
    const std::string label = launch_label(k, i);
    CUfunction f = nullptr;
    driver.check(driver.api().module_get_function(&f, lk.module.get(), l.kernel.c_str()),
                 label + ": cuModuleGetFunction");
    // Checked here so that the cast to the driver's unsigned ints cannot wrap.
    for (int64_t v : {l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2]})
      if (v < 1 || v > std::numeric_limits<int32_t>::max())
        throw CudaError(CUDA_ERROR_INVALID_VALUE,
                        fmt::format("{}: grid {}x{}x{} / block {}x{}x{} out of range", label, l.grid[0], l.grid[1],
                                    l.grid[2], l.block[0], l.block[1], l.block[2]));
    if (l.dynamic_smem_bytes < 0 || l.dynamic_smem_bytes > std::numeric_limits<int32_t>::max())
      throw CudaError(CUDA_ERROR_INVALID_VALUE,
                      fmt::format("{}: dynamic shared memory {} out of range", label, l.dynamic_smem_bytes));
    lk.functions.push_back(f);
  }
  return lk;
}

void opt_in_shared_memory(const Driver& driver, const GeneratedKernel& k, const LoadedKernel& lk, int64_t smem_optin) {
  std::map<CUfunction, int64_t> most;
  for (size_t i = 0; i < k.launches.size(); ++i)
    most[lk.functions[i]] = std::max(most[lk.functions[i]], k.launches[i].dynamic_smem_bytes);
  for (size_t i = 0; i < k.launches.size(); ++i) {
    const auto it = most.find(lk.functions[i]);
    if (it == most.end()) continue;  // settled at an earlier launch of the same kernel
    const int64_t dynamic = it->second;
    most.erase(it);
    int static_smem = 0;
    driver.check(driver.api().func_get_attribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, lk.functions[i]),
                 launch_label(k, i) + ": cuFuncGetAttribute");
    if (dynamic + static_smem <= kDefaultDynamicSmem) continue;
    driver.check(driver.api().func_set_attribute(lk.functions[i], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                 static_cast<int>(dynamic)),
                 fmt::format("{}: opting in to {} bytes of dynamic shared memory ({} static; device maximum {})",
                             launch_label(k, i), dynamic, static_smem, smem_optin));
  }
}

LoadedKernel load_kernel(const Driver& driver, const GeneratedKernel& k, const std::vector<char>& image,
                         int64_t smem_optin) {
  LoadedKernel lk = load_functions(driver, k, image);
  opt_in_shared_memory(driver, k, lk, smem_optin);
  return lk;
}

}  // namespace dc::cuda
