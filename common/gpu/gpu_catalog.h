// The table of known GPU types (common/gpu/gpus.yaml, compiled into the binary as C++ at
// build time by gen_gpu_table, so that reading it needs no YAML parser) and the mapping
// from a device, as CUDA reports it, to one of them. docs/gpus.md explains the
// matching rule and the generic fallback for devices the table does not know.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_spec.h"

namespace dc {

// The figures of one device that the driver gives in the units the catalog uses, shared by
// the worker's raw reading (DeviceAttributes) and DeviceReport. Zero means "not reported".
struct DeviceFigures {
  std::string name;                 // cuDeviceGetName: "NVIDIA A100-SXM4-40GB"
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;                 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
  int64_t l2_bytes = 0;
  int64_t smem_per_sm = 0;          // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
  int regs_per_sm = 0;
  int max_threads_per_sm = 0;
  int max_threads_per_block = 0;
  int max_blocks_per_sm = 0;
  int warp_size = 0;
};

// What a worker reads from the driver for one device. Zero means "not reported"; the
// per-SM limits then come from the table entry used as the device's reference (see
// GpuCatalog::match_device).
struct DeviceReport : DeviceFigures {
  double clock_mhz = 0;             // CU_DEVICE_ATTRIBUTE_CLOCK_RATE (kHz) / 1000
  double memory_bandwidth_gbs = 0;  // see dram_bandwidth_gbs()
  int64_t smem_per_block = 0;       // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
};

// Peak DRAM bandwidth from the driver's memory clock (kHz) and bus width (bits): two
// transfers per clock, as deviceQuery computes it (A100: 1215000 kHz, 5120 bits -> 1555).
double dram_bandwidth_gbs(double memory_clock_khz, int bus_width_bits);

class GpuCatalog {
 public:
  // The table compiled into the binary from common/gpu/gpus.yaml (defined in the generated
  // gpus_table.cpp).
  static GpuCatalog builtin();
  // A table of already checked specs (gpu_catalog_yaml.h reads and checks a YAML one).
  static GpuCatalog from_specs(std::vector<GpuSpec> specs);

  const GpuSpec* find(std::string_view canonical_name) const;  // nullptr if unknown
  // Like find, but a UserError listing the known names when unknown.
  const GpuSpec& require(std::string_view canonical_name) const;
  std::vector<std::string> names() const;  // sorted
  const std::vector<GpuSpec>& all() const { return specs_; }  // in file order

  // The table entry whose device pattern matches the device name (longest pattern wins),
  // or, when none does or the device's SM count or compute capability contradicts the
  // entry (a MIG slice, a cut-down variant), a spec flagged `generic` built from the
  // report, with a warning that estimates will be rough. UserError for a report missing
  // the figures a generic spec needs, or a device older than compute capability 7.0.
  GpuSpec match_device(const DeviceReport& report) const;

  // The matching table entry for a device name, or nullptr.
  const GpuSpec* match_name(std::string_view device_name) const;

 private:
  std::vector<GpuSpec> specs_;
};

// `--gpus a100,h100`: the named specs in the order given. UserError on an empty list or
// entry, an unknown name, or a name given twice.
std::vector<const GpuSpec*> parse_gpu_list(const GpuCatalog& catalog,
                                           const std::string& comma_list);

// The catalog as a Markdown table (name, arch, cc, SMs, clock, FP32 and FP16 tensor
// TFLOPS, GB/s, L2): the table in docs/gpus.md, which a unit test keeps in step.
std::string gpu_table_markdown(const GpuCatalog& catalog);

}  // namespace dc
