// NVML (libnvidia-ml.so.1), loaded at run time like the driver: nothing links it, so a node
// without it still measures and says it has no health data. The worker samples a CUDA device
// before and after timing and refuses to time while the GPU slows its clocks for power or
// heat or has uncorrected ECC errors (JobStatus unhealthy: not a verdict on the variant, the
// job goes to another device); the sample travels with every result. Emulated and OpenCL
// devices report "no health data" instead of made-up numbers. docs/farm.md, "Device health".
#pragma once

#include <memory>
#include <string>

#include "device_health.h"

namespace dc {

// NVML, loaded once per process. sample() never throws: a failing query gives an unsampled
// result whose note says which call failed.
class Nvml {
 public:
  // nullptr with `why` set when the library cannot be loaded or initialised.
  static std::shared_ptr<Nvml> load(const std::string& library, std::string* why);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // The device with this PCI bus id ("00000000:07:00.0", as CUDA's attributes give it).
  farm::DeviceHealth sample(const std::string& pci_bus_id) const;

  struct Api;

 private:
  Nvml() = default;
  std::unique_ptr<Api> api_;
  void* handle_ = nullptr;
};

}  // namespace dc
