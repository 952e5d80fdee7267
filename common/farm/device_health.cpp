#include "device_health.h"

#include <fmt/format.h>

namespace dc {

namespace {

struct Reason {
  uint64_t bit;
  const char* name;
};
constexpr Reason kReasons[] = {
    {nvml_reason::kSwPowerCap, "SW power cap"},
    {nvml_reason::kHwSlowdown, "HW slowdown"},
    {nvml_reason::kSwThermalSlowdown, "SW thermal slowdown"},
    {nvml_reason::kHwThermalSlowdown, "HW thermal slowdown"},
    {nvml_reason::kHwPowerBrakeSlowdown, "HW power brake"},
};

}  // namespace

farm::DeviceHealth no_health_data(const std::string& note) {
  farm::DeviceHealth h;
  h.set_sampled(false);
  h.set_note(note);
  return h;
}

std::string unhealthy_reason(const farm::DeviceHealth& h) {
  if (!h.sampled()) return "";
  std::string out;
  const uint64_t bad = h.clock_event_reasons() & nvml_reason::kUnhealthy;
  if (bad != 0) {
    std::string names;
    for (const Reason& r : kReasons)
      if (bad & r.bit) names += (names.empty() ? "" : ", ") + std::string(r.name);
    out = fmt::format("clocks slowed by {} (SM {} of {} MHz, {} C)", names, h.sm_clock_mhz(),
                      h.max_sm_clock_mhz(), h.temperature_c());
  }
  if (h.ecc_known() && h.ecc_uncorrected() > 0)
    out += fmt::format("{}{} uncorrected ECC errors since the driver loaded", out.empty() ? "" : "; ",
                       h.ecc_uncorrected());
  return out;
}

std::string describe_health(const farm::DeviceHealth& h) {
  if (!h.sampled()) return "no health data (" + h.note() + ")";
  std::string s = fmt::format("SM {} of {} MHz, {} C, clock event reasons {:#x}", h.sm_clock_mhz(),
                              h.max_sm_clock_mhz(), h.temperature_c(), h.clock_event_reasons());
  s += h.ecc_known() ? fmt::format(", {} uncorrected ECC errors", h.ecc_uncorrected()) : ", no ECC counters";
  return s;
}

}  // namespace dc
