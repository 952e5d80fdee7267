// The devices a dc-worker offers, as the farm protocol describes them (farm::GpuInventory):
// real GPUs found through the CUDA driver, or emulated ones (--emulate GPU) built from the
// GPU table. Also the command line of the measurement child that serves one device.
#pragma once

#include <string>
#include <vector>

#include "farm.pb.h"
#include "gpu/gpu_catalog.h"

namespace dc {

// An emulated device of canonical type `gpu_type` (UserError listing the known types
// otherwise), with the arch NVRTC compiles for (UserError if this NVRTC has none for it).
farm::GpuInventory emulated_inventory(const GpuCatalog& catalog, const std::string& gpu_type, int index);

// The usable real devices, all of them or the given ordinals (UserError for an ordinal that
// does not exist or cannot measure, with the reason). Empty, with *why_none set, when the
// machine has no driver or no device.
std::vector<farm::GpuInventory> real_inventory(const GpuCatalog& catalog, const std::vector<int>& ordinals,
                                               std::string* why_none);

// The OpenCL devices with a table type and SPIR support (common/opencl/opencl_device.h), all of them
// or the given indices (UserError for one that does not exist or cannot serve). Each is
// opened once: its DRAM bandwidth is probed and carried in the inventory with its fp32 peak.
// device_index is kOpenClIndexBase + the OpenCL index, apart from CUDA ordinals.
constexpr int kOpenClIndexBase = 1000;
std::vector<farm::GpuInventory> opencl_inventory(const GpuCatalog& catalog, const std::vector<int>& indices,
                                                 std::string* why_none);

// Whether some device of `inventory` computes on this machine's own cores (a real device of
// a `arch: cpu` table entry: PoCL's CPU device), so that compiling beside its timings would
// slow them.
bool serves_host_cpu_device(const std::vector<farm::GpuInventory>& inventory, const GpuCatalog& catalog);

// The worker's default number of builders: none when it serves a host CPU device (its jobs
// compile in the measurement child, one after another), else one per core.
int default_builders(const std::vector<farm::GpuInventory>& inventory, const GpuCatalog& catalog, unsigned cores);

// One line for logs: "0: h100 (emulated, sm_90)".
std::string describe_inventory(const farm::GpuInventory& g);

// `exe --measure-child --child-device HEX --cache DIR --log-level LEVEL`: the child serves
// `device` on fd 3 (worker_main.cpp). HEX is the serialized inventory.
std::vector<std::string> measure_child_argv(const std::string& exe, const farm::GpuInventory& device,
                                            const std::string& cache_dir, const std::string& log_level);
// The inverse of the HEX above; UserError when it does not decode.
farm::GpuInventory inventory_from_hex(const std::string& hex);

}  // namespace dc
