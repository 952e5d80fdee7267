#include "nvml.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <initializer_list>
#include <type_traits>
#include <utility>
#include <vector>

namespace dc {

namespace {

// The few NVML declarations dc uses, from the NVML API reference (nvml.h is not part of the
// CUDA toolkit's packages here). All are C functions returning nvmlReturn_t (0 = success).
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;                   // nvmlClockType_t NVML_CLOCK_SM
constexpr int kNvmlTemperatureGpu = 0;            // nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU
constexpr int kNvmlMemoryErrorUncorrected = 1;    // nvmlMemoryErrorType_t
constexpr int kNvmlVolatileEcc = 0;               // nvmlEccCounterType_t: since the driver loaded

}  // namespace

struct Nvml::Api {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*clock)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*max_clock)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*temperature)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*reasons)(NvmlDevice, unsigned long long*) = nullptr;
  NvmlReturn (*ecc)(NvmlDevice, int, int, unsigned long long*) = nullptr;  // optional: no ECC on some GPUs

  std::string error(NvmlReturn r) const {
    const char* s = error_string ? error_string(r) : nullptr;
    return s ? std::string(s) : fmt::format("NVML error {}", r);
  }
};

std::shared_ptr<Nvml> Nvml::load(const std::string& library, std::string* why) {
  dlerror();
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    *why = "cannot load " + library + (e ? std::string(": ") + e : "");
    return nullptr;
  }
  std::shared_ptr<Nvml> n(new Nvml());
  n->handle_ = h;
  n->api_ = std::make_unique<Api>();
  Api& a = *n->api_;
  std::vector<std::string> missing;
  // The versioned exports first, as the driver's own nvml.h macros pick them.
  const auto bind = [&](auto& fn, std::initializer_list<const char*> names, bool required = true) {
    for (const char* name : names) {
      if (void* s = dlsym(h, name)) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(s);
        return;
      }
    }
    if (required) missing.push_back(*names.begin());
  };
  bind(a.init, {"nvmlInit_v2", "nvmlInit"});
  bind(a.shutdown, {"nvmlShutdown"});
  bind(a.error_string, {"nvmlErrorString"});
  bind(a.by_pci_bus_id, {"nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByPciBusId"});
  bind(a.clock, {"nvmlDeviceGetClockInfo"});
  bind(a.max_clock, {"nvmlDeviceGetMaxClockInfo"});
  bind(a.temperature, {"nvmlDeviceGetTemperature"});
  bind(a.reasons, {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  bind(a.ecc, {"nvmlDeviceGetTotalEccErrors"}, false);
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    *why = library + " lacks " + list;
    return nullptr;  // the destructor closes the library (init never ran)
  }
  if (const NvmlReturn r = a.init(); r != kNvmlSuccess) {
    *why = "nvmlInit failed: " + a.error(r);
    a.shutdown = nullptr;
    return nullptr;
  }
  return n;
}

Nvml::~Nvml() {
  if (api_ && api_->shutdown) api_->shutdown();
  if (handle_) dlclose(handle_);
}

farm::DeviceHealth Nvml::sample(const std::string& pci_bus_id) const {
  const Api& a = *api_;
  NvmlDevice dev = nullptr;
  if (const NvmlReturn r = a.by_pci_bus_id(pci_bus_id.c_str(), &dev); r != kNvmlSuccess)
    return no_health_data("NVML does not know PCI device " + pci_bus_id + ": " + a.error(r));
  farm::DeviceHealth h;
  unsigned clock = 0, max_clock = 0, temperature = 0;
  unsigned long long reasons = 0, ecc = 0;
  if (NvmlReturn r = a.clock(dev, kNvmlClockSm, &clock); r != kNvmlSuccess)
    return no_health_data("nvmlDeviceGetClockInfo: " + a.error(r));
  if (NvmlReturn r = a.max_clock(dev, kNvmlClockSm, &max_clock); r != kNvmlSuccess)
    return no_health_data("nvmlDeviceGetMaxClockInfo: " + a.error(r));
  if (NvmlReturn r = a.temperature(dev, kNvmlTemperatureGpu, &temperature); r != kNvmlSuccess)
    return no_health_data("nvmlDeviceGetTemperature: " + a.error(r));
  if (NvmlReturn r = a.reasons(dev, &reasons); r != kNvmlSuccess)
    return no_health_data("nvmlDeviceGetCurrentClocksEventReasons: " + a.error(r));
  // ECC counters exist only where ECC is on; a GPU without it has none to report.
  const bool ecc_known = a.ecc != nullptr &&
                         a.ecc(dev, kNvmlMemoryErrorUncorrected, kNvmlVolatileEcc, &ecc) == kNvmlSuccess;
  h.set_sampled(true);
  h.set_sm_clock_mhz(clock);
  h.set_max_sm_clock_mhz(max_clock);
  h.set_temperature_c(temperature);
  h.set_clock_event_reasons(reasons);
  h.set_ecc_known(ecc_known);
  h.set_ecc_uncorrected(ecc_known ? ecc : 0);
  return h;
}

}  // namespace dc
