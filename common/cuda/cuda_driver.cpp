#include "cuda_driver.h"

#include <dlfcn.h>

#include <exception>
#include <utility>

namespace dc::cuda {
namespace {

// One Api member: its name, the exports to try (first found wins) and how to store it.
struct Entry {
  const char* member;
  std::vector<const char*> exports;
  void (*store)(Api& api, void* symbol);
};

// Versioned exports first. A fallback to the unversioned name is listed only where both
// have the same signature (cuMemAlloc without _v2 takes a 32-bit pointer: never used).
#define DC_ENTRY(member, ...)                                             \
  Entry {                                                                 \
    #member, {__VA_ARGS__}, [](Api& api, void* symbol) {                  \
      api.member = reinterpret_cast<decltype(Api::member)>(symbol);       \
    }                                                                     \
  }

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = {
      DC_ENTRY(init, "cuInit"),
      DC_ENTRY(driver_get_version, "cuDriverGetVersion"),
      DC_ENTRY(get_error_name, "cuGetErrorName"),
      DC_ENTRY(get_error_string, "cuGetErrorString"),
      DC_ENTRY(device_get_count, "cuDeviceGetCount"),
      DC_ENTRY(device_get, "cuDeviceGet"),
      DC_ENTRY(device_get_name, "cuDeviceGetName"),
      DC_ENTRY(device_get_attribute, "cuDeviceGetAttribute"),
      DC_ENTRY(device_total_mem, "cuDeviceTotalMem_v2"),
      DC_ENTRY(primary_ctx_retain, "cuDevicePrimaryCtxRetain"),
      DC_ENTRY(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
      DC_ENTRY(ctx_set_current, "cuCtxSetCurrent"),
      DC_ENTRY(ctx_synchronize, "cuCtxSynchronize"),
      DC_ENTRY(mem_get_info, "cuMemGetInfo_v2"),
      DC_ENTRY(module_load_data, "cuModuleLoadData"),
      DC_ENTRY(module_unload, "cuModuleUnload"),
      DC_ENTRY(module_get_function, "cuModuleGetFunction"),
      DC_ENTRY(func_set_attribute, "cuFuncSetAttribute"),
      DC_ENTRY(mem_alloc, "cuMemAlloc_v2"),
      DC_ENTRY(mem_free, "cuMemFree_v2"),
      DC_ENTRY(memcpy_htod, "cuMemcpyHtoD_v2"),
      DC_ENTRY(memcpy_dtoh, "cuMemcpyDtoH_v2"),
      DC_ENTRY(memset_d8, "cuMemsetD8_v2"),
      DC_ENTRY(launch_kernel, "cuLaunchKernel"),
      DC_ENTRY(event_create, "cuEventCreate"),
      DC_ENTRY(event_record, "cuEventRecord"),
      DC_ENTRY(event_synchronize, "cuEventSynchronize"),
      // _v2 appeared in CUDA 12.8 with the same signature; older drivers have only v1.
      DC_ENTRY(event_elapsed_time, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
      DC_ENTRY(event_destroy, "cuEventDestroy_v2", "cuEventDestroy"),
      DC_ENTRY(func_get_attribute, "cuFuncGetAttribute"),
      DC_ENTRY(stream_create, "cuStreamCreate"),
      DC_ENTRY(stream_destroy, "cuStreamDestroy_v2", "cuStreamDestroy"),
      DC_ENTRY(stream_synchronize, "cuStreamSynchronize"),
      // The plain cuStreamBeginCapture lacks the mode argument: no fallback.
      DC_ENTRY(stream_begin_capture, "cuStreamBeginCapture_v2"),
      DC_ENTRY(stream_end_capture, "cuStreamEndCapture"),
      // cuda.h maps cuGraphInstantiate to this name from CUDA 12 on; the driver has had it
      // since 11.4. (The exported cuGraphInstantiate is the old five-argument form.)
      DC_ENTRY(graph_instantiate, "cuGraphInstantiateWithFlags"),
      DC_ENTRY(graph_launch, "cuGraphLaunch"),
      DC_ENTRY(graph_exec_destroy, "cuGraphExecDestroy"),
      DC_ENTRY(graph_destroy, "cuGraphDestroy"),
      DC_ENTRY(memset_d8_async, "cuMemsetD8Async"),
      DC_ENTRY(memcpy_htod_async, "cuMemcpyHtoDAsync_v2"),
      DC_ENTRY(memcpy_dtoh_async, "cuMemcpyDtoHAsync_v2"),
      DC_ENTRY(memcpy_dtod_async, "cuMemcpyDtoDAsync_v2"),
  };
  return table;
}

#undef DC_ENTRY

// Names for the codes dc reports when the driver cannot name them (a stub library, a
// failed load).
const char* fallback_error_name(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case CUDA_ERROR_LAUNCH_FAILED: return "CUDA_ERROR_LAUNCH_FAILED";
    case CUDA_ERROR_UNKNOWN: return "CUDA_ERROR_UNKNOWN";
    default: return nullptr;
  }
}

std::string describe(const Api& api, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.get_error_name == nullptr || api.get_error_name(r, &name) != CUDA_SUCCESS) name = nullptr;
  if (api.get_error_string == nullptr || api.get_error_string(r, &text) != CUDA_SUCCESS) text = nullptr;
  if (name == nullptr) name = fallback_error_name(r);
  std::string out = name ? std::string(name) : "CUDA error " + std::to_string(static_cast<int>(r));
  if (text != nullptr) out += std::string(" (") + text + ")";
  return out;
}

struct DlClose {
  void operator()(void* handle) const noexcept {
    if (handle != nullptr) dlclose(handle);
  }
};

DriverLoad load(const std::string& library) {
  DriverLoad out;
  out.library = library;
  dlerror();
  void* raw = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (raw == nullptr) {
    const char* why = dlerror();
    out.error = "no CUDA driver: cannot load " + library + (why ? std::string(": ") + why : "") +
                " (is the NVIDIA driver installed?)";
    return out;
  }
  out.library_found = true;
  std::shared_ptr<void> handle(raw, DlClose{});

  Api api;
  for (const Entry& e : entries()) {
    void* symbol = nullptr;
    for (const char* name : e.exports)
      if ((symbol = dlsym(raw, name)) != nullptr) break;
    if (symbol == nullptr) out.missing_symbols.push_back(e.exports.front());
    else e.store(api, symbol);
  }
  if (!out.missing_symbols.empty()) {
    std::string list;
    for (const auto& s : out.missing_symbols) list += (list.empty() ? "" : ", ") + s;
    out.error = "no CUDA driver: " + library + " lacks " + list + " (driver too old?)";
    return out;
  }

  out.init_result = api.init(0);
  if (out.init_result != CUDA_SUCCESS) {
    out.error = "no CUDA driver: cuInit failed in " + library + " with " +
                describe(api, out.init_result);
    return out;
  }
  int version = 0;
  if (api.driver_get_version(&version) != CUDA_SUCCESS) version = 0;
  out.driver = std::make_shared<const Driver>(std::move(handle), api, library, version);
  return out;
}

}  // namespace

const std::vector<SymbolNames>& api_symbols() {
  static const std::vector<SymbolNames> names = [] {
    std::vector<SymbolNames> v;
    for (const Entry& e : entries()) v.push_back({e.member, e.exports});
    return v;
  }();
  return names;
}

std::string driver_version_string(int version) {
  if (version <= 0) return "unknown";
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string Driver::version_string() const { return driver_version_string(version_); }

std::string Driver::error_text(CUresult result) const { return describe(api_, result); }

void Driver::check(CUresult result, const std::string& what) const {
  if (result != CUDA_SUCCESS) throw CudaError(result, what + ": " + error_text(result));
}

DriverLoad load_driver(const std::string& library) {
  try {
    return load(library);
  } catch (const std::exception& e) {  // allocation failure: still a result, not a throw
    DriverLoad out;
    out.library = library;
    out.error = std::string("no CUDA driver: ") + e.what();
    return out;
  }
}

const DriverLoad& system_driver() {
  static const DriverLoad* const loaded = new DriverLoad(load_driver("libcuda.so.1"));
  return *loaded;
}

// ---- RAII handles --------------------------------------------------------------------

void PrimaryContextRelease::operator()(CUctx_st* ctx) const noexcept {
  if (ctx != nullptr && driver != nullptr) driver->api().primary_ctx_release(device);
}

PrimaryContext retain_primary_context(const Driver& driver, CUdevice device) {
  CUcontext ctx = nullptr;
  driver.check(driver.api().primary_ctx_retain(&ctx, device),
               "cuDevicePrimaryCtxRetain(device " + std::to_string(device) + ")");
  PrimaryContext owned(ctx, PrimaryContextRelease{&driver, device});
  driver.check(driver.api().ctx_set_current(ctx), "cuCtxSetCurrent");
  return owned;
}

void ModuleUnload::operator()(CUmod_st* module) const noexcept {
  if (module != nullptr && driver != nullptr) driver->api().module_unload(module);
}

Module load_module(const Driver& driver, const std::vector<char>& image) {
  if (image.empty()) throw CudaError(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadData: empty image");
  CUmodule module = nullptr;
  driver.check(driver.api().module_load_data(&module, image.data()), "cuModuleLoadData");
  return Module(module, ModuleUnload{&driver});
}

void EventDestroy::operator()(CUevent_st* event) const noexcept {
  if (event != nullptr && driver != nullptr) driver->api().event_destroy(event);
}

Event create_event(const Driver& driver) {
  CUevent event = nullptr;
  driver.check(driver.api().event_create(&event, CU_EVENT_DEFAULT), "cuEventCreate");
  return Event(event, EventDestroy{&driver});
}

void StreamDestroy::operator()(CUstream_st* stream) const noexcept {
  if (stream != nullptr && driver != nullptr) driver->api().stream_destroy(stream);
}

Stream create_stream(const Driver& driver, unsigned flags) {
  CUstream stream = nullptr;
  driver.check(driver.api().stream_create(&stream, flags), "cuStreamCreate");
  return Stream(stream, StreamDestroy{&driver});
}

void GraphDestroy::operator()(CUgraph_st* graph) const noexcept {
  if (graph != nullptr && driver != nullptr) driver->api().graph_destroy(graph);
}

void GraphExecDestroy::operator()(CUgraphExec_st* exec) const noexcept {
  if (exec != nullptr && driver != nullptr) driver->api().graph_exec_destroy(exec);
}

void abandon_capture(const Driver& driver, CUstream stream) noexcept {
  CUgraph graph = nullptr;
  driver.api().stream_end_capture(stream, &graph);
  if (graph != nullptr) driver.api().graph_destroy(graph);
}

GraphExec instantiate_graph(const Driver& driver, CUgraph graph) {
  CUgraphExec exec = nullptr;
  driver.check(driver.api().graph_instantiate(&exec, graph, 0), "cuGraphInstantiate");
  return GraphExec(exec, GraphExecDestroy{&driver});
}

DeviceMemory::DeviceMemory(const Driver& driver, size_t bytes)
    : driver_(&driver), bytes_(bytes == 0 ? 1 : bytes) {
  driver.check(driver.api().mem_alloc(&ptr_, bytes_),
               "cuMemAlloc(" + std::to_string(bytes_) + " bytes)");
}

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : driver_(std::exchange(other.driver_, nullptr)),
      ptr_(std::exchange(other.ptr_, 0)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    reset();
    driver_ = std::exchange(other.driver_, nullptr);
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceMemory::~DeviceMemory() { reset(); }

void DeviceMemory::reset() noexcept {
  if (ptr_ != 0 && driver_ != nullptr) driver_->api().mem_free(ptr_);
  ptr_ = 0;
  bytes_ = 0;
}

}  // namespace dc::cuda

namespace dc {

CudaErrorClass classify_cuda_error(int code) {
  switch (static_cast<CUresult>(code)) {
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_OUT_OF_MEMORY:
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
    case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_NOT_FOUND:  // the launch names a kernel the module lacks
    case CUDA_ERROR_INVALID_CLUSTER_SIZE:
      return {JobStatus::launch_error, false};
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_UNKNOWN:
    // cuda.h: "the process must be terminated and relaunched" after these too.
    case CUDA_ERROR_CONTAINED:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
    case CUDA_ERROR_EXTERNAL_DEVICE:
    case CUDA_ERROR_MPS_CLIENT_TERMINATED:
      return {JobStatus::runtime_fault, true};
    case CUDA_ERROR_LAUNCH_TIMEOUT:
      return {JobStatus::timeout, true};
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
      return {JobStatus::unsupported, false};
    default:
      return {JobStatus::runtime_fault, false};
  }
}

}  // namespace dc
