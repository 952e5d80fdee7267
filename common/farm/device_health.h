// A device's health as a result carries it (farm::DeviceHealth): NVML's clock event reasons,
// the verdict "may this device time?", and one line for logs. The worker samples it
// (worker/nvml.h); the coordinator logs it per worker. docs/farm.md, "Device health".
#pragma once

#include <cstdint>
#include <string>

#include "farm.pb.h"
#include "farm/measurement.h"

namespace dc {
// NVML's clock event ("throttle") reason bits (nvmlClocksEventReason*, the NVML API reference).
namespace nvml_reason {
constexpr uint64_t kGpuIdle = 0x1;
constexpr uint64_t kApplicationsClocksSetting = 0x2;
constexpr uint64_t kSwPowerCap = 0x4;
constexpr uint64_t kHwSlowdown = 0x8;
constexpr uint64_t kSyncBoost = 0x10;
constexpr uint64_t kSwThermalSlowdown = 0x20;
constexpr uint64_t kHwThermalSlowdown = 0x40;
constexpr uint64_t kHwPowerBrakeSlowdown = 0x80;
constexpr uint64_t kDisplayClockSetting = 0x100;
// The reasons that make a time untrustworthy: the clocks were pulled down by power or heat.
// Idle, application clocks, sync boost and display settings are not slowdowns of a run.
constexpr uint64_t kUnhealthy =
    kSwPowerCap | kHwSlowdown | kSwThermalSlowdown | kHwThermalSlowdown | kHwPowerBrakeSlowdown;
}  // namespace nvml_reason

// "" when the sample allows timing, else why not ("clocks slowed by SW power cap, HW thermal
// slowdown (SM 1410 of 1980 MHz, 87 C)", "3 uncorrected ECC errors since the driver loaded").
std::string unhealthy_reason(const farm::DeviceHealth& h);
// One line for logs and the tune's report: the figures, or the note of an unsampled device.
std::string describe_health(const farm::DeviceHealth& h);
// The same figures as a Measurement stores them, and back (the client protocol's Record).
DeviceHealthFigures health_figures(const farm::DeviceHealth& h);
farm::DeviceHealth health_message(const DeviceHealthFigures& f);
// A device without health data (emulated, OpenCL, or NVML missing): sampled false, `note` why.
farm::DeviceHealth no_health_data(const std::string& note);

}  // namespace dc
