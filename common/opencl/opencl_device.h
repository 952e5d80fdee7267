// OpenCL devices on the worker side: discovery (every device of every ICD platform, each
// mapped to a device type of the GPU table: PoCL's CPU device is `pocl-cpu`), the figures a
// device reports plus the host CPU's where the device is the CPU (SIMD width from the ISA
// flags, FMA units), a short DRAM bandwidth probe, and an opened device (context, profiling
// queue) for the runner (opencl_runner.h). docs/opencl.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/gpu_catalog.h"

namespace dc::ocl {

struct DeviceInfo {
  int index = 0;                 // position over all platforms' devices, in platform order
  std::string name, vendor, platform_name, platform_version, driver_version, device_version;
  bool is_cpu = false;
  int compute_units = 0;
  int clock_mhz = 0;
  uint64_t global_mem_bytes = 0, local_mem_bytes = 0;
  int64_t max_work_group = 0;
  int preferred_vector_float = 0;  // CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT
  bool fp16 = false;               // cl_khr_fp16
  bool spir = false;               // cl_khr_spir: takes SPIR bitcode (how dc builds)
  // CPU devices: the host's figures (host_cpu_figures); 0 elsewhere.
  int simd_fp32_lanes = 0, fma_units = 0;
  std::string gpu_type;            // the table's name, "" when no entry matches
};

// Every OpenCL device; empty with *why_none set when there is no ICD, platform or device.
std::vector<DeviceInfo> list_devices(const GpuCatalog& catalog, std::string* why_none = nullptr);

// The table type of a device: "pocl-cpu" for PoCL's CPU device, else the OpenCL entry whose
// device_patterns match its name; "" if none.
std::string device_type_for(const DeviceInfo& d, const GpuCatalog& catalog);

// The host CPU's fp32 SIMD lanes per vector instruction (avx512f 16, avx/avx2 8, else 4) and
// FMA units per core (2 where the ISA has FMA: every AVX2 core from Haswell and Zen on has two
// 256-bit FMA pipes; 1 otherwise), from /proc/cpuinfo's flags.
void host_cpu_figures(int* simd_fp32_lanes, int* fma_units);

// Peak fp32 FLOP/s of a device from its figures: 2 x CUs x lanes per CU x clock.
double fp32_peak_flops(const DeviceInfo& d);

// One line: "pocl-cpu: pthread-haswell-AMD EPYC 7B13 (PoCL 3.1, 2 CUs, 2445 MHz, 8x2 fp32 lanes)".
std::string describe(const DeviceInfo& d);

// An opened device: context and in-order profiling queue. Handles are opaque here.
class Device {
 public:
  // UserError when there is no such device.
  Device(const GpuCatalog& catalog, int index);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  DeviceInfo info_;
  std::unique_ptr<Impl> impl_;
};

// DRAM bandwidth in GB/s: a copy kernel over 2 x 64 MiB, best of a few runs (read + write
// bytes over the profiled time). 0 if the device cannot run it.
double probe_bandwidth_gbs(Device& device);

}  // namespace dc::ocl
