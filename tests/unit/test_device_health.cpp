// Device health (common/farm/device_health.h, worker/nvml.h): NVML loaded at run time and
// sampled by PCI bus id, the verdict that refuses timing on a device slowed for power or heat
// or with ECC errors, and what the farm does with an unhealthy result. The fake NVML
// (support/fake_nvml.cpp) reads its throttle reasons and ECC count from the environment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "device_health.h"
#include "farm/status.h"
#include "nvml.h"

namespace dc {
namespace {

constexpr const char* kBus = "00000000:07:00.0";  // the fake's one device

// Sets the fake's environment for one test and clears it after.
struct FakeNvmlState {
  FakeNvmlState() { clear(); }
  ~FakeNvmlState() { clear(); }
  static void clear() {
    for (const char* v : {"FAKE_NVML_REASONS", "FAKE_NVML_ECC", "FAKE_NVML_NO_ECC", "FAKE_NVML_SM_CLOCK"}) unsetenv(v);
  }
  void set(const char* name, const char* value) { setenv(name, value, 1); }
};

// support/fake_nvml.cpp's module, built beside the fake libcuda (tests/CMakeLists.txt).
std::string fake_nvml_path() {
  const std::string cuda = DC_FAKE_CUDA;
  return cuda.substr(0, cuda.rfind('/') + 1) + "libdc_fake_nvml.so";
}

std::shared_ptr<Nvml> fake() {
  std::string why;
  auto n = Nvml::load(fake_nvml_path(), &why);
  EXPECT_TRUE(n) << why;
  return n;
}

TEST(DeviceHealth, AHealthyDeviceIsSampledByItsBusIdAndMayTime) {
  FakeNvmlState env;
  const auto nvml = fake();
  ASSERT_TRUE(nvml);
  const farm::DeviceHealth h = nvml->sample(kBus);
  ASSERT_TRUE(h.sampled()) << h.note();
  EXPECT_EQ(h.sm_clock_mhz(), 1980u);
  EXPECT_EQ(h.max_sm_clock_mhz(), 1980u);
  EXPECT_EQ(h.temperature_c(), 45u);
  EXPECT_EQ(h.clock_event_reasons(), 0u);
  EXPECT_TRUE(h.ecc_known());
  EXPECT_EQ(h.ecc_uncorrected(), 0u);
  EXPECT_EQ(unhealthy_reason(h), "");
  EXPECT_EQ(describe_health(h), "SM 1980 of 1980 MHz, 45 C, clock event reasons 0x0, 0 uncorrected ECC errors");
}

// Each power or thermal slowdown refuses timing and is named; two at once are both named.
TEST(DeviceHealth, PowerAndThermalSlowdownsRefuseTiming) {
  FakeNvmlState env;
  const auto nvml = fake();
  ASSERT_TRUE(nvml);
  const std::pair<const char*, const char*> cases[] = {
      {"0x4", "SW power cap"}, {"0x8", "HW slowdown"}, {"0x20", "SW thermal slowdown"},
      {"0x40", "HW thermal slowdown"}, {"0x80", "HW power brake"}};
  for (const auto& [bits, name] : cases) {
    env.set("FAKE_NVML_REASONS", bits);
    env.set("FAKE_NVML_SM_CLOCK", "1410");
    const std::string why = unhealthy_reason(nvml->sample(kBus));
    EXPECT_EQ(why, std::string("clocks slowed by ") + name + " (SM 1410 of 1980 MHz, 45 C)") << bits;
  }
  env.set("FAKE_NVML_REASONS", "0x44");
  const std::string both = unhealthy_reason(nvml->sample(kBus));
  EXPECT_NE(both.find("SW power cap, HW thermal slowdown"), std::string::npos) << both;
}

// Idle, application clocks, sync boost and display settings lower clocks without a slowdown
// of the run: they do not refuse.
TEST(DeviceHealth, IdleAndClockSettingsAreNotSlowdowns) {
  FakeNvmlState env;
  const auto nvml = fake();
  ASSERT_TRUE(nvml);
  env.set("FAKE_NVML_REASONS", "0x113");
  const farm::DeviceHealth h = nvml->sample(kBus);
  EXPECT_EQ(h.clock_event_reasons(), 0x113u);
  EXPECT_EQ(unhealthy_reason(h), "");
}

TEST(DeviceHealth, UncorrectedEccErrorsRefuseTimingAndNoCountersIsNoError) {
  FakeNvmlState env;
  const auto nvml = fake();
  ASSERT_TRUE(nvml);
  env.set("FAKE_NVML_ECC", "3");
  EXPECT_EQ(unhealthy_reason(nvml->sample(kBus)), "3 uncorrected ECC errors since the driver loaded");
  env.set("FAKE_NVML_REASONS", "0x4");
  EXPECT_NE(unhealthy_reason(nvml->sample(kBus)).find("; 3 uncorrected ECC errors"), std::string::npos);
  FakeNvmlState::clear();
  env.set("FAKE_NVML_NO_ECC", "1");
  const farm::DeviceHealth h = nvml->sample(kBus);
  ASSERT_TRUE(h.sampled());
  EXPECT_FALSE(h.ecc_known());
  EXPECT_EQ(unhealthy_reason(h), "");
  EXPECT_NE(describe_health(h).find("no ECC counters"), std::string::npos);
}

// What NVML cannot answer is "no health data" with the reason, never made-up figures, and
// never a refusal.
TEST(DeviceHealth, WhatNvmlCannotAnswerIsNoHealthData) {
  FakeNvmlState env;
  const auto nvml = fake();
  ASSERT_TRUE(nvml);
  const farm::DeviceHealth unknown = nvml->sample("00000000:99:00.0");
  EXPECT_FALSE(unknown.sampled());
  EXPECT_EQ(unknown.sm_clock_mhz(), 0u);
  EXPECT_NE(unknown.note().find("00000000:99:00.0"), std::string::npos) << unknown.note();
  EXPECT_NE(unknown.note().find("Not Found"), std::string::npos) << unknown.note();
  EXPECT_EQ(unhealthy_reason(unknown), "");
  EXPECT_EQ(describe_health(no_health_data("emulated device")), "no health data (emulated device)");

  std::string why;
  EXPECT_FALSE(Nvml::load("/nonexistent/libnvidia-ml.so.1", &why));
  EXPECT_NE(why.find("cannot load /nonexistent/libnvidia-ml.so.1"), std::string::npos) << why;
  // A library that is not NVML (the fake CUDA driver) lacks its entry points, by name.
  why.clear();
  EXPECT_FALSE(Nvml::load(DC_FAKE_CUDA, &why));
  EXPECT_NE(why.find("lacks nvmlInit_v2"), std::string::npos) << why;
}

// unhealthy says nothing about the variant: not final (a later tune measures it again) and
// never recorded, like internal_error.
TEST(DeviceHealth, UnhealthyIsNeitherFinalNorRecorded) {
  EXPECT_EQ(parse_job_status("unhealthy"), JobStatus::unhealthy);
  EXPECT_FALSE(is_final_status(JobStatus::unhealthy));
  EXPECT_FALSE(is_recorded_status(JobStatus::unhealthy));
  EXPECT_FALSE(is_recorded_status(JobStatus::internal_error));
  EXPECT_TRUE(is_recorded_status(JobStatus::implausible));
  EXPECT_TRUE(is_recorded_status(JobStatus::ok));
}

}  // namespace
}  // namespace dc
