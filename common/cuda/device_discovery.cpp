#include "device_discovery.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <exception>

#include "ir/error.h"
#include "nvrtc.h"
#include "nvrtc_loader.h"

namespace dc {
namespace {

// An attribute the driver does not know (a removed one, an old driver) reads as 0:
// "not reported", which the catalog fills from its reference entry.
int attribute(const cuda::Driver& d, CUdevice_attribute which, CUdevice dev) {
  int value = 0;
  if (d.api().device_get_attribute(&value, which, dev) != CUDA_SUCCESS) return 0;
  return value;
}

DeviceAttributes read_attributes(const cuda::Driver& d, CUdevice dev) {
  DeviceAttributes a;
  char name[256] = {};
  d.check(d.api().device_get_name(name, sizeof name - 1, dev), "cuDeviceGetName");
  a.name = name;
  a.cc_major = attribute(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  a.cc_minor = attribute(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  a.sm_count = attribute(d, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  a.clock_khz = attribute(d, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev);
  a.memory_clock_khz = attribute(d, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev);
  a.bus_width_bits = attribute(d, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev);
  a.l2_bytes = attribute(d, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev);
  a.smem_per_sm = attribute(d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev);
  a.smem_per_block_optin = attribute(d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
  a.regs_per_sm = attribute(d, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, dev);
  a.max_threads_per_sm = attribute(d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev);
  a.max_threads_per_block = attribute(d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev);
  a.max_blocks_per_sm = attribute(d, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, dev);
  a.warp_size = attribute(d, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
  size_t total = 0;
  if (d.api().device_total_mem(&total, dev) == CUDA_SUCCESS)
    a.total_memory_bytes = static_cast<int64_t>(total);
  return a;
}

int arch_number(const std::string& arch) {
  // "sm_86" -> 86; anything else (sm_90a, compute_80) -> -1.
  if (arch.size() < 4 || arch.compare(0, 3, "sm_") != 0) return -1;
  const std::string digits = arch.substr(3);
  if (!std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); }))
    return -1;
  return std::stoi(digits);
}

}  // namespace

DeviceReport device_report(const DeviceAttributes& a) {
  DeviceReport r;
  static_cast<DeviceFigures&>(r) = a;
  r.clock_mhz = a.clock_khz / 1000.0;
  r.memory_bandwidth_gbs =
      a.memory_clock_khz > 0 && a.bus_width_bits > 0
          ? dram_bandwidth_gbs(a.memory_clock_khz, a.bus_width_bits)
          : 0.0;
  r.smem_per_block = a.smem_per_block_optin;
  return r;
}

std::string nvrtc_arch_for(int cc_major, int cc_minor, const std::vector<std::string>& supported) {
  const int want = cc_major * 10 + cc_minor;
  int best = -1;
  for (const auto& s : supported) {
    const int n = arch_number(s);
    if (n / 10 == cc_major && n <= want && n > best) best = n;
  }
  return best < 0 ? std::string() : "sm_" + std::to_string(best);
}

std::vector<DiscoveredDevice> discover_devices(const GpuCatalog& catalog, std::string* why_none) {
  return discover_devices(cuda::system_driver(), catalog, why_none);
}

std::vector<DiscoveredDevice> discover_devices(const cuda::DriverLoad& load,
                                               const GpuCatalog& catalog, std::string* why_none) {
  std::vector<DiscoveredDevice> out;
  auto none = [&](std::string why) {
    if (why_none) *why_none = std::move(why);
    return std::vector<DiscoveredDevice>{};
  };
  if (!load.driver) return none(load.error);
  const cuda::Driver& d = *load.driver;
  try {
    int count = 0;
    d.check(d.api().device_get_count(&count), "cuDeviceGetCount");
    if (count == 0)
      return none("no CUDA device: the driver (" + d.version_string() + ") reports none");
    const std::vector<std::string> archs = supported_archs();
    for (int i = 0; i < count; ++i) {
      CUdevice dev = 0;
      d.check(d.api().device_get(&dev, i), "cuDeviceGet(" + std::to_string(i) + ")");
      DiscoveredDevice x;
      x.ordinal = i;
      x.attributes = read_attributes(d, dev);
      x.report = device_report(x.attributes);
      x.driver_version = d.version_string();
      try {
        x.spec = catalog.match_device(x.report);
      } catch (const UserError& e) {  // older than Volta, or figures missing
        x.problem = e.what();
      }
      if (x.problem.empty()) {
        x.arch = nvrtc_arch_for(x.attributes.cc_major, x.attributes.cc_minor, archs);
        if (x.arch.empty())
          x.problem = fmt::format("no installed NVRTC compiles for sm_{}{} ({}). {}", x.attributes.cc_major,
                                  x.attributes.cc_minor, describe_nvrtc(installed_nvrtc()),
                                  nvrtc_install_hint(x.attributes.cc_major * 10 + x.attributes.cc_minor));
        else
          x.nvrtc_version = nvrtc_version_for(x.arch);
      }
      out.push_back(std::move(x));
    }
  } catch (const cuda::CudaError& e) {
    return none(std::string("no CUDA device: ") + e.what());
  }
  if (why_none) why_none->clear();
  return out;
}

std::string describe_device(const DiscoveredDevice& d) {
  const auto& a = d.attributes;
  std::string s = fmt::format("{}: {} -> {}", d.ordinal, a.name,
                              d.spec.name.empty() ? "(none)" : d.spec.name);
  if (d.spec.generic) s += " (generic)";
  s += fmt::format(" ({}, {} SMs, {:.1f} GiB, driver {}{})", d.arch.empty() ? "no arch" : d.arch,
                   a.sm_count, static_cast<double>(a.total_memory_bytes) / (1u << 30),
                   d.driver_version, d.nvrtc_version.empty() ? "" : ", NVRTC " + d.nvrtc_version);
  if (!d.usable()) s += ": unusable: " + d.problem;
  return s;
}

}  // namespace dc
