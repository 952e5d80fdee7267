#include "emulator.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include "emulator/compile.h"
#include "emulator/grid_runner.h"
#include "emulator/guarded_memory.h"
#include "ir/error.h"
#include "ir/clock.h"
#include "gpu/gpu_catalog.h"

namespace dc {

namespace emu {
extern const char* const kRuntimeText;  // generated from emulator/dc_emu_runtime.h
}  // namespace emu

namespace {

namespace fs = std::filesystem;

// The largest dynamic shared memory any GPU of the table grants a block (gpus.yaml's
// smem_per_block_bytes, the opt-in maximum: 227 KiB on sm_90). The emulator runs a kernel for
// no GPU in particular; the limits of a GPU type are the launch check's (gpu/occupancy.h).
int64_t max_dynamic_smem_bytes() {
  static const int64_t bytes = [] {
    const GpuCatalog catalog = GpuCatalog::builtin();
    int64_t most = 0;
    for (const GpuSpec& g : catalog.all()) most = std::max(most, g.smem_per_block_bytes);
    return most;
  }();
  return bytes;
}

struct LibraryHandle {
  void* handle = nullptr;
  explicit LibraryHandle(const std::string& path) : handle(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {}
  ~LibraryHandle() {
    if (handle != nullptr) dlclose(handle);
  }
  LibraryHandle(const LibraryHandle&) = delete;
  LibraryHandle& operator=(const LibraryHandle&) = delete;
};

struct TempDir {
  std::string path;
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

// The calling thread's TLS block of a loaded library (it must have been touched already).
struct TlsBlock {
  size_t module = 0;
  unsigned char* data = nullptr;
  size_t bytes = 0;
};

TlsBlock find_tls_block(void* handle) {
  TlsBlock block;
  if (dlinfo(handle, RTLD_DI_TLS_MODID, &block.module) != 0 || block.module == 0) return block;
  dl_iterate_phdr(
      +[](dl_phdr_info* info, size_t, void* p) -> int {
        auto* b = static_cast<TlsBlock*>(p);
        if (info->dlpi_tls_modid != b->module) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_TLS) b->bytes = info->dlpi_phdr[i].p_memsz;
        b->data = static_cast<unsigned char*>(info->dlpi_tls_data);
        return 1;
      },
      &block);
  return block;
}

std::string hex_address(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// "element 72 of buffer 't2' (70 elements)" style positions.
std::string position(ptrdiff_t offset, size_t element_bytes) {
  if (element_bytes > 0 && offset % static_cast<ptrdiff_t>(element_bytes) == 0)
    return "element " + std::to_string(offset / static_cast<ptrdiff_t>(element_bytes));
  return "byte offset " + std::to_string(offset);
}

struct MemoryMap {
  const GeneratedKernel* kernel = nullptr;
  const std::vector<emu::GuardedRegion>* buffers = nullptr;
  const emu::GuardedRegion* dynamic_smem = nullptr;
  size_t dynamic_smem_bytes = 0;
  const emu::FiberStacks* stacks = nullptr;
};

std::string describe_fault(const emu::FaultInfo& fault, const MemoryMap& memory) {
  const std::string signal = " [" + emu::signal_description(fault) + "]";
  if (fault.signo != SIGSEGV && fault.signo != SIGBUS) return emu::signal_description(fault);
  for (size_t i = 0; i < memory.buffers->size(); ++i) {
    const KernelBuffer& desc = memory.kernel->buffers[i];
    const size_t elem = dtype_size(desc.dtype);
    const size_t count = static_cast<size_t>(shape_numel(desc.shape));
    ptrdiff_t offset = 0;
    const auto where = (*memory.buffers)[i].locate(fault.addr, &offset);
    const std::string name = "buffer " + std::to_string(i) + " '" + desc.name + "' (" +
                             std::to_string(count) + " elements)";
    switch (where) {
      case emu::GuardedRegion::Where::after:
      case emu::GuardedRegion::Where::before:
        return "out-of-bounds access at " + position(offset, elem) + " of " + name + signal;
      case emu::GuardedRegion::Where::inside:
        if (desc.role == BufferRole::input)
          return "write to input " + name + " at " + position(offset, elem) +
                 " (inputs are read-only)" + signal;
        return "invalid access inside " + name + signal;
      case emu::GuardedRegion::Where::outside: break;
    }
  }
  if (memory.dynamic_smem != nullptr) {
    ptrdiff_t offset = 0;
    if (memory.dynamic_smem->locate(fault.addr, &offset) != emu::GuardedRegion::Where::outside)
      return "out-of-bounds access at byte offset " + std::to_string(offset) +
             " of dynamic shared memory (" + std::to_string(memory.dynamic_smem_bytes) + " bytes)" + signal;
  }
  if (memory.stacks->in_guard(fault.addr))
    return "stack overflow of an emulated thread (" + std::to_string(memory.stacks->bytes()) +
           " bytes each: EmulatorOptions::stack_bytes)" + signal;
  if (reinterpret_cast<uintptr_t>(fault.addr) < 65536)
    return "null pointer access (address " + hex_address(fault.addr) + ")" + signal;
  return "invalid memory access at address " + hex_address(fault.addr) + signal;
}

void check_buffers(const GeneratedKernel& kernel, const std::vector<Tensor>& buffers) {
  DC_INTERNAL_CHECK(buffers.size() == kernel.buffers.size(), "emulate: ", buffers.size(),
                    " tensors for the ", kernel.buffers.size(), " buffers of kernel '",
                    kernel.template_name, "'");
  for (size_t i = 0; i < buffers.size(); ++i) {
    const KernelBuffer& desc = kernel.buffers[i];
    const Tensor& t = buffers[i];
    if (!t.defined()) {
      DC_INTERNAL_CHECK(desc.role != BufferRole::input, "emulate: input buffer ", i, " '",
                        desc.name, "' is not given");
      continue;
    }
    DC_INTERNAL_CHECK(t.dtype() == desc.dtype, "emulate: buffer ", i, " '", desc.name, "' is ",
                      dtype_name(t.dtype()), " but the kernel expects ", dtype_name(desc.dtype));
    DC_INTERNAL_CHECK(t.shape() == desc.shape, "emulate: buffer ", i, " '", desc.name, "' has shape ",
                      shape_str(t.shape()), " but the kernel expects ", shape_str(desc.shape));
  }
  for (size_t l = 0; l < kernel.launches.size(); ++l)
    for (int a : kernel.launches[l].args)
      DC_INTERNAL_CHECK(a >= 0 && static_cast<size_t>(a) < kernel.buffers.size(), "emulate: launch ", l,
                        " ('", kernel.launches[l].kernel, "') names buffer ", a, " of ",
                        kernel.buffers.size());
}

}  // namespace

std::string default_emulator_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return (fs::path(xdg) / "dc" / "emulator").string();
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return (fs::path(home) / ".cache" / "dc" / "emulator").string();
  std::error_code ec;
  return (fs::temp_directory_path(ec) / "dc-emulator-cache").string();
}

std::string emulator_source(const GeneratedKernel& kernel) {
  return std::string(emu::kRuntimeText) + "\n#line 1 \"kernel.cu\"\n" + kernel.source + "\n";
}

EmulatorResult emulate(const GeneratedKernel& kernel, std::vector<Tensor>& buffers,
                       const EmulatorOptions& options) {
  check_buffers(kernel, buffers);
  EmulatorResult result;

  const auto compile_start = std::chrono::steady_clock::now();
  const emu::CompiledLibrary compiled = emu::compile_library(emulator_source(kernel), options);
  result.compile_seconds = seconds_since(compile_start);
  result.from_cache = compiled.from_cache;
  TempDir temp_dir{compiled.temp_dir};  // outlives the loaded library
  if (!compiled.error.empty()) {
    result.error = compiled.error;
    return result;
  }

  LibraryHandle library(compiled.path);
  if (library.handle == nullptr) {
    const char* why = dlerror();
    result.error = "cannot load the compiled kernel " + compiled.path + ": " + (why ? why : "?");
    return result;
  }
  std::vector<dc_emu_launch_fn> stubs;
  for (const Launch& launch : kernel.launches) {
    void* sym = dlsym(library.handle, ("dc_emu_launch_" + launch.kernel).c_str());
    if (sym == nullptr) {
      result.error = "kernel '" + launch.kernel + "' is not in the source: it must be defined as "
                     "extern \"C\" __global__ void " + launch.kernel + "(...) followed by "
                     "DC_EXPORT_KERNEL(" + launch.kernel + ")";
      return result;
    }
    stubs.push_back(reinterpret_cast<dc_emu_launch_fn>(sym));
  }
  auto thread_state = reinterpret_cast<dc_emu_thread_state_fn>(dlsym(library.handle, "dc_emu_thread_state"));
  DC_INTERNAL_CHECK(thread_state != nullptr, "emulator library without dc_emu_thread_state");
  dc_emu_state* state = thread_state();  // also allocates this thread's TLS block
  const TlsBlock tls = find_tls_block(library.handle);
  const auto* state_bytes = reinterpret_cast<const unsigned char*>(state);
  DC_INTERNAL_CHECK(tls.data != nullptr && state_bytes >= tls.data &&
                        state_bytes + sizeof(dc_emu_state) <= tls.data + tls.bytes,
                    "emulator: the kernel library's state is not in its TLS block");

  // Device memory: guarded copies of the buffers.
  std::vector<emu::GuardedRegion> memory;
  memory.reserve(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    const KernelBuffer& desc = kernel.buffers[i];
    const size_t bytes = static_cast<size_t>(shape_numel(desc.shape)) * dtype_size(desc.dtype);
    memory.emplace_back(bytes);
    emu::GuardedRegion& region = memory.back();
    if (desc.role == BufferRole::input) {
      if (bytes > 0) std::memcpy(region.data(), buffers[i].raw(), bytes);
      region.set_read_only(true);
    } else if (desc.zero_init) {
      std::memset(region.data(), 0, bytes);
    }  // else left poisoned
  }
  int64_t max_threads = 1;
  for (const Launch& launch : kernel.launches)
    max_threads = std::max(max_threads, std::clamp<int64_t>(launch.block[0] * launch.block[1] * launch.block[2], 1, 1024));
  emu::FiberStacks stacks(static_cast<int>(max_threads), options.stack_bytes);

  const auto run_start = std::chrono::steady_clock::now();
  {
    emu::FaultTrap trap;
    emu::GridRunner runner(state, tls.data, tls.bytes, stacks);
    for (size_t l = 0; l < kernel.launches.size() && result.error.empty(); ++l) {
      const Launch& launch = kernel.launches[l];
      const std::string prefix = "launch " + std::to_string(l) + " (kernel '" + launch.kernel + "'): ";
      if (launch.dynamic_smem_bytes < 0 || launch.dynamic_smem_bytes > max_dynamic_smem_bytes()) {
        result.error = prefix + "dynamic shared memory of " + std::to_string(launch.dynamic_smem_bytes) +
                       " bytes (0 to " + std::to_string(max_dynamic_smem_bytes()) + ")";
        break;
      }
      std::optional<emu::GuardedRegion> dynamic_smem;
      emu::GridLaunch grid_launch;
      grid_launch.kernel = launch.kernel;
      grid_launch.grid = launch.grid;
      grid_launch.block = launch.block;
      grid_launch.num_args = static_cast<int>(launch.args.size());
      if (launch.dynamic_smem_bytes > 0) {
        dynamic_smem.emplace(static_cast<size_t>(launch.dynamic_smem_bytes));
        grid_launch.dynamic_smem = dynamic_smem->data();
        grid_launch.dynamic_smem_bytes = dynamic_smem->size();
      }
      std::vector<void*> args;
      for (int a : launch.args) args.push_back(memory[static_cast<size_t>(a)].data());
      const emu::GridRunner::Outcome outcome = runner.run(stubs[l], args.data(), grid_launch);
      if (outcome.faulted) {
        const MemoryMap map{&kernel, &memory, dynamic_smem ? &*dynamic_smem : nullptr,
                            grid_launch.dynamic_smem_bytes, &stacks};
        result.error = prefix + (outcome.location.empty() ? "" : outcome.location + ": ") +
                       describe_fault(outcome.fault, map);
      } else if (!outcome.error.empty()) {
        result.error = prefix + outcome.error;
      }
    }
  }
  result.run_seconds = seconds_since(run_start);

  for (size_t i = 0; i < buffers.size(); ++i) {
    const KernelBuffer& desc = kernel.buffers[i];
    if (desc.role == BufferRole::input) continue;
    // A fresh tensor: the one given may share its buffer with other holders.
    buffers[i] = Tensor(desc.dtype, desc.shape);
    if (buffers[i].nbytes() > 0) std::memcpy(buffers[i].raw_mutable(), memory[i].data(), buffers[i].nbytes());
  }
  result.ok = result.error.empty();
  return result;
}

}  // namespace dc
