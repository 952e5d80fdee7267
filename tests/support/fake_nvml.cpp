// A fake NVML (libnvidia-ml) for tests on machines without a GPU: one device at PCI bus id
// 00000000:07:00.0, an H100 at 1980 of 1980 MHz and 45 C, whose clock event reasons and
// uncorrected ECC count come from the environment at each call (FAKE_NVML_REASONS, hex or
// decimal; FAKE_NVML_ECC; FAKE_NVML_NO_ECC=1: the GPU has no ECC counters), so a test steers
// it with setenv. Only the entry points worker/nvml.cpp resolves, with NVML's C signatures.
#include <cstdlib>
#include <cstring>

namespace {
constexpr int kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotSupported = 3, kNotFound = 6;
constexpr unsigned kClockSm = 1;
bool initialised = false;
int device_tag = 0;  // the one device's handle points here

unsigned long long env_number(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 0) : 0;
}
}  // namespace

extern "C" {
int nvmlInit_v2() {
  initialised = true;
  return kSuccess;
}
int nvmlShutdown() {
  initialised = false;
  return kSuccess;
}
const char* nvmlErrorString(int r) {
  switch (r) {
    case kSuccess: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported";
    case kNotFound: return "Not Found";
    default: return "Unknown Error";
  }
}
int nvmlDeviceGetHandleByPciBusId_v2(const char* bus, void** device) {
  if (!initialised) return kUninitialized;
  if (bus == nullptr || device == nullptr) return kInvalidArgument;
  if (std::strcmp(bus, "00000000:07:00.0") != 0) return kNotFound;
  *device = &device_tag;
  return kSuccess;
}
int nvmlDeviceGetClockInfo(void* device, unsigned type, unsigned* mhz) {
  if (device != &device_tag || type != kClockSm) return kInvalidArgument;
  *mhz = static_cast<unsigned>(env_number("FAKE_NVML_SM_CLOCK") ? env_number("FAKE_NVML_SM_CLOCK") : 1980);
  return kSuccess;
}
int nvmlDeviceGetMaxClockInfo(void* device, unsigned type, unsigned* mhz) {
  if (device != &device_tag || type != kClockSm) return kInvalidArgument;
  *mhz = 1980;
  return kSuccess;
}
int nvmlDeviceGetTemperature(void* device, unsigned sensor, unsigned* celsius) {
  if (device != &device_tag || sensor != 0) return kInvalidArgument;
  *celsius = 45;
  return kSuccess;
}
int nvmlDeviceGetCurrentClocksEventReasons(void* device, unsigned long long* reasons) {
  if (device != &device_tag) return kInvalidArgument;
  *reasons = env_number("FAKE_NVML_REASONS");
  return kSuccess;
}
int nvmlDeviceGetTotalEccErrors(void* device, unsigned error_type, unsigned counter, unsigned long long* count) {
  if (device != &device_tag || error_type != 1 || counter != 0) return kInvalidArgument;
  if (env_number("FAKE_NVML_NO_ECC")) return kNotSupported;
  *count = env_number("FAKE_NVML_ECC");
  return kSuccess;
}
}
