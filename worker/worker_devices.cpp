#include "worker_devices.h"

#include <fmt/format.h>

#include <algorithm>

#include "device_discovery.h"
#include "ir/error.h"
#include "nvrtc.h"
#include "nvrtc_loader.h"
#include "opencl_compile.h"
#include "opencl_device.h"

namespace dc {

farm::GpuInventory emulated_inventory(const GpuCatalog& catalog, const std::string& gpu_type, int index) {
  const GpuSpec& spec = catalog.require(gpu_type);
  const std::string arch = nvrtc_arch_for(spec.cc_major, spec.cc_minor, supported_archs());
  DC_USER_CHECK(!arch.empty(), "no installed NVRTC compiles for ", spec.name, " (", spec.sm_arch(),
                "), so it cannot be emulated here (", describe_nvrtc(installed_nvrtc()), "). ",
                nvrtc_install_hint(spec.cc_major * 10 + spec.cc_minor));
  farm::GpuInventory g;
  g.set_device_index(index);
  g.set_gpu_type(spec.name);
  g.set_device_name("emulated " + spec.full_name);
  g.set_cc_major(spec.cc_major);
  g.set_cc_minor(spec.cc_minor);
  g.set_driver_version("emulated");
  g.set_nvrtc_version(nvrtc_version_for(arch));
  g.set_emulated(true);
  g.set_arch(arch);
  return g;
}

std::vector<farm::GpuInventory> real_inventory(const GpuCatalog& catalog, const std::vector<int>& ordinals,
                                               std::string* why_none) {
  const std::vector<DiscoveredDevice> found = discover_devices(catalog, why_none);
  std::vector<farm::GpuInventory> out;
  if (found.empty()) return out;
  for (int o : ordinals)
    DC_USER_CHECK(std::any_of(found.begin(), found.end(), [o](const DiscoveredDevice& d) { return d.ordinal == o; }),
                  "--device ", o, ": this machine has CUDA devices 0 to ", found.size() - 1);
  for (const DiscoveredDevice& d : found) {
    const bool wanted = ordinals.empty() || std::find(ordinals.begin(), ordinals.end(), d.ordinal) != ordinals.end();
    if (!wanted) continue;
    if (!d.usable()) {
      DC_USER_CHECK(ordinals.empty(), "--device ", d.ordinal, " cannot measure: ", d.problem);
      continue;
    }
    farm::GpuInventory g;
    g.set_device_index(d.ordinal);
    g.set_gpu_type(d.spec.name);
    g.set_device_name(d.attributes.name);
    g.set_cc_major(d.attributes.cc_major);
    g.set_cc_minor(d.attributes.cc_minor);
    g.set_memory_bytes(static_cast<uint64_t>(d.attributes.total_memory_bytes));
    g.set_driver_version(d.driver_version);
    g.set_nvrtc_version(nvrtc_version_for(d.arch));
    g.set_emulated(false);
    g.set_arch(d.arch);
    out.push_back(std::move(g));
  }
  if (out.empty() && why_none != nullptr) *why_none = "no usable CUDA device (each one reported a problem)";
  return out;
}

std::vector<farm::GpuInventory> opencl_inventory(const GpuCatalog& catalog, const std::vector<int>& indices,
                                                 std::string* why_none) {
  const std::vector<ocl::DeviceInfo> found = ocl::list_devices(catalog, why_none);
  for (int i : indices)
    DC_USER_CHECK(i >= 0 && static_cast<size_t>(i) < found.size(), "--opencl ", i, ": this machine has ",
                  found.size(), " OpenCL device(s)", found.empty() && why_none ? " (" + *why_none + ")" : "");
  std::vector<farm::GpuInventory> out;
  for (const ocl::DeviceInfo& d : found) {
    const bool wanted = indices.empty() || std::find(indices.begin(), indices.end(), d.index) != indices.end();
    if (!wanted) continue;
    const std::string problem = d.gpu_type.empty() ? "no entry of the GPU table matches it"
                                : !d.spir          ? "it takes no SPIR (cl_khr_spir)"
                                                   : "";
    if (!problem.empty()) {
      DC_USER_CHECK(indices.empty(), "--opencl ", d.index, " (", d.name, ") cannot serve: ", problem);
      continue;
    }
    ocl::Device device(catalog, d.index);
    farm::GpuInventory g;
    g.set_device_index(kOpenClIndexBase + d.index);
    g.set_gpu_type(d.gpu_type);
    g.set_device_name(d.name);
    g.set_memory_bytes(d.global_mem_bytes);
    g.set_driver_version(d.platform_version);
    g.set_emulated(false);
    g.set_arch("spir64");
    g.set_api("opencl");
    g.set_api_index(d.index);
    g.set_compiler(opencl_clang_for(d.platform_version));
    g.set_nvrtc_version(clang_version(g.compiler()));
    g.set_dram_bandwidth_gbs(ocl::probe_bandwidth_gbs(device));
    g.set_fp32_peak_gflops(ocl::fp32_peak_flops(d) / 1e9);
    out.push_back(std::move(g));
  }
  if (out.empty() && why_none != nullptr && why_none->empty()) *why_none = "no OpenCL device dc can serve";
  return out;
}

std::string describe_inventory(const farm::GpuInventory& g) {
  if (g.api() == "opencl")
    return fmt::format("{}: {} ({}, OpenCL, {}, {}; {:.1f} GFLOP/s fp32 peak, {:.1f} GB/s measured)", g.device_index(),
                       g.gpu_type(), g.device_name(), g.driver_version(), g.compiler(), g.fp32_peak_gflops(),
                       g.dram_bandwidth_gbs());
  return str_cat(g.device_index(), ": ", g.gpu_type(), " (", g.emulated() ? "emulated" : g.device_name(), ", ",
                 g.arch(), ", NVRTC ", g.nvrtc_version(), g.emulated() ? "" : ", driver " + g.driver_version(), ")");
}

std::vector<std::string> measure_child_argv(const std::string& exe, const farm::GpuInventory& device,
                                            const std::string& cache_dir, const std::string& log_level) {
  std::string bytes;
  device.SerializeToString(&bytes);
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : bytes) {
    hex += digits[c >> 4];
    hex += digits[c & 15];
  }
  return {exe, "--measure-child", "--child-device", hex, "--cache", cache_dir, "--log-level", log_level};
}

farm::GpuInventory inventory_from_hex(const std::string& hex) {
  auto value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  DC_USER_CHECK(hex.size() % 2 == 0, "--child-device: not a hex string");
  std::string bytes;
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = value(hex[i]), lo = value(hex[i + 1]);
    DC_USER_CHECK(hi >= 0 && lo >= 0, "--child-device: not a hex string");
    bytes += static_cast<char>(hi * 16 + lo);
  }
  farm::GpuInventory g;
  DC_USER_CHECK(g.ParseFromString(bytes), "--child-device: not a device description");
  return g;
}

bool serves_host_cpu_device(const std::vector<farm::GpuInventory>& inventory, const GpuCatalog& catalog) {
  return std::any_of(inventory.begin(), inventory.end(), [&catalog](const farm::GpuInventory& g) {
    const GpuSpec* spec = catalog.find(g.gpu_type());
    return !g.emulated() && spec != nullptr && spec->arch == "cpu";
  });
}

int default_builders(const std::vector<farm::GpuInventory>& inventory, const GpuCatalog& catalog, unsigned cores) {
  // A compile beside a CPU device's timing takes cores the device measures on.
  return serves_host_cpu_device(inventory, catalog) ? 0 : static_cast<int>(std::max(1u, cores));
}

}  // namespace dc
