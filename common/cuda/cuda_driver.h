// The CUDA driver API, loaded at run time: dlopen("libcuda.so.1") and the few entry points
// dc uses, resolved by name (the _v2 forms where the driver has them). Nothing links
// libcuda at build time, so the same binary starts on a machine without a driver and says
// why it found no GPU. The handles the worker owns (primary context, modules, device
// memory, events) are RAII types after ggml-cpp.h: a unique_ptr with a deleter struct.
//
// Only cuda.h's declarations are used (types, enums and, through decltype, the exact
// signature of every entry point); see docs/gpu-runtime.md.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "farm/status.h"

namespace dc::cuda {

// The entry points, each typed from its cuda.h declaration (a wrong signature cannot
// compile). Members are snake_case so that cuda.h's renaming macros (cuMemAlloc ->
// cuMemAlloc_v2) leave them alone.
struct Api {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDriverGetVersion) driver_get_version = nullptr;
  decltype(&::cuGetErrorName) get_error_name = nullptr;
  decltype(&::cuGetErrorString) get_error_string = nullptr;
  decltype(&::cuDeviceGetCount) device_get_count = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetName) device_get_name = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuDeviceTotalMem) device_total_mem = nullptr;               // _v2
  decltype(&::cuDevicePrimaryCtxRetain) primary_ctx_retain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) primary_ctx_release = nullptr;   // _v2
  decltype(&::cuCtxSetCurrent) ctx_set_current = nullptr;
  decltype(&::cuCtxSynchronize) ctx_synchronize = nullptr;
  decltype(&::cuMemGetInfo) mem_get_info = nullptr;                       // _v2
  decltype(&::cuModuleLoadData) module_load_data = nullptr;
  decltype(&::cuModuleUnload) module_unload = nullptr;
  decltype(&::cuModuleGetFunction) module_get_function = nullptr;
  decltype(&::cuFuncSetAttribute) func_set_attribute = nullptr;
  decltype(&::cuMemAlloc) mem_alloc = nullptr;                            // _v2
  decltype(&::cuMemFree) mem_free = nullptr;                              // _v2
  decltype(&::cuMemcpyHtoD) memcpy_htod = nullptr;                        // _v2
  decltype(&::cuMemcpyDtoH) memcpy_dtoh = nullptr;                        // _v2
  decltype(&::cuMemsetD8) memset_d8 = nullptr;                            // _v2
  decltype(&::cuLaunchKernel) launch_kernel = nullptr;
  decltype(&::cuEventCreate) event_create = nullptr;
  decltype(&::cuEventRecord) event_record = nullptr;
  decltype(&::cuEventSynchronize) event_synchronize = nullptr;
  decltype(&::cuEventElapsedTime) event_elapsed_time = nullptr;           // _v2 from CUDA 12.8
  decltype(&::cuEventDestroy) event_destroy = nullptr;                    // _v2
  // The plan runtime (codegen/plan_runtime/backend_cuda.cpp): streams, graph capture and replay.
  decltype(&::cuFuncGetAttribute) func_get_attribute = nullptr;
  decltype(&::cuStreamCreate) stream_create = nullptr;
  decltype(&::cuStreamDestroy) stream_destroy = nullptr;                  // _v2
  decltype(&::cuStreamSynchronize) stream_synchronize = nullptr;
  decltype(&::cuStreamBeginCapture) stream_begin_capture = nullptr;       // _v2
  decltype(&::cuStreamEndCapture) stream_end_capture = nullptr;
  decltype(&::cuGraphInstantiateWithFlags) graph_instantiate = nullptr;   // = cuGraphInstantiate
  decltype(&::cuGraphLaunch) graph_launch = nullptr;
  decltype(&::cuGraphExecDestroy) graph_exec_destroy = nullptr;
  decltype(&::cuGraphDestroy) graph_destroy = nullptr;
  decltype(&::cuMemsetD8Async) memset_d8_async = nullptr;
  decltype(&::cuMemcpyHtoDAsync) memcpy_htod_async = nullptr;             // _v2
  decltype(&::cuMemcpyDtoHAsync) memcpy_dtoh_async = nullptr;             // _v2
  decltype(&::cuMemcpyDtoDAsync) memcpy_dtod_async = nullptr;             // _v2
};

// The exported names load_driver resolves, in Api's member order, each with the names it
// tries first to last (the versioned export first).
struct SymbolNames {
  const char* member;
  std::vector<const char*> exports;
};
const std::vector<SymbolNames>& api_symbols();

// A CUDA call that failed: the code, its name and text, and what dc was doing.
struct CudaError : std::runtime_error {
  CudaError(CUresult result, const std::string& message)
      : std::runtime_error(message), code(result) {}
  CUresult code;
};

// A loaded, initialised driver. Shared by everything that uses it; the library stays
// loaded as long as any holder does.
class Driver {
 public:
  // Made by load_driver: `handle` is the dlopen handle that keeps `api` valid.
  Driver(std::shared_ptr<void> handle, const Api& api, std::string library, int version)
      : handle_(std::move(handle)), api_(api), library_(std::move(library)), version_(version) {}

  const Api& api() const { return api_; }
  const std::string& library() const { return library_; }
  int version() const { return version_; }          // cuDriverGetVersion: 12040
  std::string version_string() const;                // "12.4"

  // "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)"; a code the
  // driver cannot name is "CUDA error 12345".
  std::string error_text(CUresult result) const;
  // Throws CudaError("WHAT: <error_text>") unless result is CUDA_SUCCESS.
  void check(CUresult result, const std::string& what) const;

 private:
  std::shared_ptr<void> handle_;
  Api api_;
  std::string library_;
  int version_ = 0;
};

// The outcome of loading a driver library: never an exception. `driver` is set only when
// the library loaded, every symbol resolved and cuInit(0) succeeded; otherwise `error`
// says which step failed ("no CUDA driver: ...").
struct DriverLoad {
  std::shared_ptr<const Driver> driver;
  std::string library;                       // the name or path given to dlopen
  bool library_found = false;                // dlopen succeeded
  std::vector<std::string> missing_symbols;  // Api members with no export in the library
  CUresult init_result = CUDA_SUCCESS;       // what cuInit returned, when it was called
  std::string error;
};

DriverLoad load_driver(const std::string& library = "libcuda.so.1");

// libcuda.so.1, loaded once per process on first use and never unloaded (contexts and
// modules may live until exit).
const DriverLoad& system_driver();

// "12.4" from cuDriverGetVersion's 12040.
std::string driver_version_string(int version);

// ---- RAII handles --------------------------------------------------------------------
// Deleters hold the Driver by pointer: the owner of the handles keeps the Driver alive
// (GpuDevice holds its shared_ptr). They ignore failures: after a sticky error every call
// fails, and a destructor must not throw.

struct PrimaryContextRelease {
  const Driver* driver = nullptr;
  CUdevice device = 0;
  void operator()(CUctx_st* ctx) const noexcept;
};
using PrimaryContext = std::unique_ptr<CUctx_st, PrimaryContextRelease>;
// Retains the device's primary context (shared with any CUDA runtime user in the process).
PrimaryContext retain_primary_context(const Driver& driver, CUdevice device);

struct ModuleUnload {
  const Driver* driver = nullptr;
  void operator()(CUmod_st* module) const noexcept;
};
using Module = std::unique_ptr<CUmod_st, ModuleUnload>;
// Loads a CUBIN (common/cuda/nvrtc.h's CompileResult::cubin) into the current context.
Module load_module(const Driver& driver, const std::vector<char>& image);

struct EventDestroy {
  const Driver* driver = nullptr;
  void operator()(CUevent_st* event) const noexcept;
};
using Event = std::unique_ptr<CUevent_st, EventDestroy>;
Event create_event(const Driver& driver);  // CU_EVENT_DEFAULT: timing enabled

struct StreamDestroy {
  const Driver* driver = nullptr;
  void operator()(CUstream_st* stream) const noexcept;
};
using Stream = std::unique_ptr<CUstream_st, StreamDestroy>;
// A stream of the current context. CU_STREAM_NON_BLOCKING by default: no implicit
// synchronisation with the legacy default stream, so the owner orders its copies itself.
Stream create_stream(const Driver& driver, unsigned flags = CU_STREAM_NON_BLOCKING);

struct GraphDestroy {
  const Driver* driver = nullptr;
  void operator()(CUgraph_st* graph) const noexcept;
};
using Graph = std::unique_ptr<CUgraph_st, GraphDestroy>;

struct GraphExecDestroy {
  const Driver* driver = nullptr;
  void operator()(CUgraphExec_st* exec) const noexcept;
};
using GraphExec = std::unique_ptr<CUgraphExec_st, GraphExecDestroy>;

// Stream capture: everything `record` enqueues on `stream` becomes one graph
// (CU_STREAM_CAPTURE_MODE_THREAD_LOCAL: only this thread's unsafe calls are refused). When
// `record` throws, or the driver invalidated the capture, the capture is ended and nothing
// leaks; the exception (or a CudaError from cuStreamEndCapture) propagates.
template <class Record>
Graph capture_graph(const Driver& driver, CUstream stream, Record&& record);
// cuGraphInstantiate (flags 0): the executable form of `graph`, replayed by cuGraphLaunch.
GraphExec instantiate_graph(const Driver& driver, CUgraph graph);

// Device memory: CUdeviceptr is an integer, not a pointer, so a small move-only class
// rather than a unique_ptr.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  // Allocates `bytes` (at least 1) in the current context.
  DeviceMemory(const Driver& driver, size_t bytes);
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory();

  CUdeviceptr get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void reset() noexcept;
  const Driver* driver_ = nullptr;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

// ---- capture_graph -------------------------------------------------------------------

// Ends a capture without throwing (a failed capture leaves a half-made graph, or none).
void abandon_capture(const Driver& driver, CUstream stream) noexcept;

template <class Record>
Graph capture_graph(const Driver& driver, CUstream stream, Record&& record) {
  driver.check(driver.api().stream_begin_capture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
               "cuStreamBeginCapture");
  try {
    record();
  } catch (...) {
    abandon_capture(driver, stream);
    throw;
  }
  CUgraph graph = nullptr;
  const CUresult r = driver.api().stream_end_capture(stream, &graph);
  Graph owned(graph, GraphDestroy{&driver});
  driver.check(r, "cuStreamEndCapture");
  if (!owned) throw CudaError(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "cuStreamEndCapture: no graph");
  return owned;
}

}  // namespace dc::cuda

namespace dc {

// What a CUDA error code means for a job: its status and whether the context is lost.
struct CudaErrorClass {
  JobStatus status = JobStatus::runtime_fault;
  bool sticky = false;
};
// Launch refusals (bad configuration, too many resources, out of memory) are launch_error;
// faults inside a kernel (illegal address, misaligned access, trap, illegal instruction)
// are runtime_fault and sticky; the display watchdog (CUDA_ERROR_LAUNCH_TIMEOUT) is a
// sticky timeout; a CUBIN the device cannot load is unsupported; anything else is a
// runtime_fault. `code` is a CUresult.
CudaErrorClass classify_cuda_error(int code);

}  // namespace dc
