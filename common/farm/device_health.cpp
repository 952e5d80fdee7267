#include "device_health.h"

#include <algorithm>
#include <cstdint>

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

DeviceHealthFigures health_figures(const farm::DeviceHealth& h) {
  DeviceHealthFigures f;
  f.sampled = h.sampled();
  f.note = h.note();
  if (!f.sampled) return f;  // whatever else the message holds is not a sample
  f.sm_clock_mhz = h.sm_clock_mhz();
  f.max_sm_clock_mhz = h.max_sm_clock_mhz();
  f.temperature_c = h.temperature_c();
  f.clock_event_reasons = h.clock_event_reasons();
  f.ecc_known = h.ecc_known();
  f.ecc_uncorrected = static_cast<int64_t>(std::min<uint64_t>(h.ecc_uncorrected(), INT64_MAX));
  return f;
}

farm::DeviceHealth health_message(const DeviceHealthFigures& f) {
  farm::DeviceHealth h;
  h.set_sampled(f.sampled);
  h.set_note(f.note);
  if (!f.sampled) return h;
  h.set_sm_clock_mhz(static_cast<uint32_t>(f.sm_clock_mhz));
  h.set_max_sm_clock_mhz(static_cast<uint32_t>(f.max_sm_clock_mhz));
  h.set_temperature_c(static_cast<uint32_t>(f.temperature_c));
  h.set_clock_event_reasons(f.clock_event_reasons);
  h.set_ecc_known(f.ecc_known);
  h.set_ecc_uncorrected(static_cast<uint64_t>(f.ecc_uncorrected));
  return h;
}

std::string describe_health(const farm::DeviceHealth& h) { return describe_health(health_figures(h)); }

}  // namespace dc
