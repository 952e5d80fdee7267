// Which GPUs this machine has, as the CUDA driver reports them, each mapped to its
// canonical GPU type (common/gpu/gpus.yaml through GpuCatalog::match_device) and to the
// architecture NVRTC compiles its kernels for. No driver, a stub driver or no device is an
// empty list with the reason, never an exception.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_driver.h"
#include "gpu/gpu_catalog.h"

namespace dc {

// The figures read from the driver for one device, as the driver gives them (kHz, bits,
// bytes); 0 where the driver does not report one. The ones the catalog takes as they are
// come from DeviceFigures.
struct DeviceAttributes : DeviceFigures {
  int clock_khz = 0;               // CU_DEVICE_ATTRIBUTE_CLOCK_RATE
  int memory_clock_khz = 0;        // CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE
  int bus_width_bits = 0;          // CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH
  int64_t smem_per_block_optin = 0;  // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
  int64_t total_memory_bytes = 0;  // cuDeviceTotalMem
};

// The catalog's view of the attributes (bandwidth from memory clock and bus width).
DeviceReport device_report(const DeviceAttributes& a);

// The architecture to compile a device's kernels for with the given NVRTC: "sm_XY" itself
// if supported, else the newest supported sm_XZ with Z < Y (a CUBIN runs on devices of the
// same major version and an equal or higher minor); "" if there is none (sm_70 on NVRTC 13).
std::string nvrtc_arch_for(int cc_major, int cc_minor, const std::vector<std::string>& supported);

struct DiscoveredDevice {
  int ordinal = 0;                  // CUDA device ordinal (cuDeviceGet)
  DeviceAttributes attributes;
  DeviceReport report;
  GpuSpec spec;                     // canonical type (spec.name), or a generic spec
  std::string arch;                 // NVRTC target ("sm_86"); "" when none
  std::string driver_version;       // "12.4"
  std::string nvrtc_version;        // of the NVRTC that compiles for `arch` ("12.9"); "" when none
  // Why this device cannot measure ("compute capability 6.1 is below 7.0", "no installed
  // NVRTC compiles for sm_70 (...). sm_70 needs NVRTC 12: ..."); "" when it can.
  std::string problem;
  bool usable() const { return problem.empty(); }
};

// Every device of the system driver (libcuda.so.1). When the list is empty, `why_none`
// (if given) says why: no driver library, a stub, cuInit's error, or zero devices.
std::vector<DiscoveredDevice> discover_devices(const GpuCatalog& catalog,
                                               std::string* why_none = nullptr);
// The same through a given driver load (tests load other libraries).
std::vector<DiscoveredDevice> discover_devices(const cuda::DriverLoad& driver,
                                               const GpuCatalog& catalog,
                                               std::string* why_none = nullptr);

// One line per device for the worker's start-up message and HELLO: "0: NVIDIA H100 80GB
// HBM3 -> h100 (sm_90, 132 SMs, 79.1 GiB, driver 12.4, NVRTC 13.0)".
std::string describe_device(const DiscoveredDevice& d);

}  // namespace dc
