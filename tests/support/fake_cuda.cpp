// A fake CUDA driver library for tests on machines without a GPU: it exports the entry
// points common/cuda/cuda_driver.cpp resolves (with cuda.h's own prototypes, so the _v2 names
// come out right) and behaves like one A100-SXM4-40GB whose "device memory" is host memory
// and whose "kernels" are a few built-in behaviours chosen by name:
//   copy(in, out)     out[t] = in[t] for every thread t of the grid
//   fill_one(out)     out[t] = 1.0f;  fill_two(out): 2.0f
//   accumulate(out)   out[t] += 1.0f
//   fault             an illegal address: asynchronous, so calls that only enqueue still
//                     succeed; the next call that waits for the device (synchronize,
//                     a blocking copy) reports it, and from then on every call (sticky)
//   resources         the launch is refused with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
//   slow              takes 20 ms instead of the usual 0.25 ms; any other name does nothing
//   dc_timing_spin(ns) the timing spin (gpu_runner.cpp, loaded from PTX text): advances
//                     the clock by its argument, counted as "spins", not as "launches"
// Modules load from a CUBIN (ELF magic) or from PTX text (".version" or "//" first).
// Each launch advances a fake clock that events read, so timing loops are deterministic.
// Functions are one handle per name and module, freed with it; their static shared memory
// is the test's "static_smem_bytes", and their default dynamic limit 48 KiB minus it, as
// cuda.h documents CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
// Streams are all one queue that runs at once, except while capturing: then launches and
// memsets are recorded (kernel parameters copied, as the real driver does) into a graph
// that cuGraphLaunch replays. Copies into a capture are refused, like unsafe calls.
// Tests steer and inspect it through dc_fake_cuda_reset/set/get (dlopen the same path).
#include <cuda.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

struct CUctx_st {
  int unused = 0;
};
struct CUfunc_st {
  std::string name;
  int static_smem = 0;
  int max_dynamic_smem = 48 * 1024;
};
struct CUmod_st {
  std::map<std::string, std::unique_ptr<CUfunc_st>> functions;
};
struct CUevent_st {
  double ms = 0;
  bool recorded = false;
};
using FakeOp = std::function<CUresult()>;
struct CUstream_st {
  bool capturing = false;
  bool invalidated = false;  // a call failed during capture
  std::vector<FakeOp> captured;
};
struct CUgraph_st {
  std::vector<FakeOp> ops;
};
struct CUgraphExec_st {
  std::vector<FakeOp> ops;
};

namespace {

struct State {
  CUresult sticky = CUDA_SUCCESS;   // once set, every call returns it
  CUresult pending = CUDA_SUCCESS;  // a fault no synchronisation has reported yet
  double clock_ms = 0;
  std::map<std::string, double> values;  // settings and counters
};

State& state() {
  static State s;
  return s;
}

double& value(const std::string& key) { return state().values[key]; }

void reset() {
  State& s = state();
  s = State{};
  s.values["devices"] = 1;
  s.values["ms_per_launch"] = 0.25;
}

struct Init {
  Init() { reset(); }
} init_once;

CUctx_st the_context;

// Large memsets (an L2 flush) are counted but not performed: their contents never matter.
constexpr size_t kLargeMemset = 16u << 20;

CUresult memset_now(CUdeviceptr dst, unsigned char byte, size_t n) {
  if (n >= kLargeMemset) {
    ++value("large_memsets");
    value("large_memset_bytes") = static_cast<double>(n);
    return CUDA_SUCCESS;
  }
  std::memset(reinterpret_cast<void*>(dst), byte, n);
  ++value("small_memsets");
  return CUDA_SUCCESS;
}

// A call that waits for the device reports a pending fault, which becomes sticky.
CUresult synchronize() {
  State& s = state();
  if (s.pending != CUDA_SUCCESS && s.sticky == CUDA_SUCCESS) s.sticky = s.pending;
  s.pending = CUDA_SUCCESS;
  return s.sticky;
}

// Runs now, or records into the stream's capture. A capture that sees an error is
// invalidated, as in the real driver.
CUresult enqueue(CUstream stream, FakeOp op) {
  if (state().sticky) return state().sticky;
  if (stream == nullptr || !stream->capturing) return op();
  stream->captured.push_back(std::move(op));
  return CUDA_SUCCESS;
}

CUresult refuse_in_capture(CUstream stream) {
  if (stream == nullptr || !stream->capturing) return CUDA_SUCCESS;
  stream->invalidated = true;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

// The kernel's effect; `args` are the pointer parameters, already read.
CUresult run_kernel(const std::string& name, size_t threads, const std::vector<CUdeviceptr>& args) {
  State& s = state();
  if (s.sticky) return s.sticky;
  auto arg = [&](size_t i) { return reinterpret_cast<float*>(args.at(i)); };
  if (name == "copy") {
    for (size_t t = 0; t < threads; ++t) arg(1)[t] = arg(0)[t];
  } else if (name == "fill_one" || name == "fill_two") {
    const float v = name == "fill_one" ? 1.f : 2.f;
    for (size_t t = 0; t < threads; ++t) arg(0)[t] = v;
  } else if (name == "accumulate") {
    for (size_t t = 0; t < threads; ++t) arg(0)[t] += 1.f;
  } else if (name == "fault") {
    s.pending = CUDA_ERROR_ILLEGAL_ADDRESS;
  } else if (name == "dc_timing_spin") {
    s.clock_ms += static_cast<double>(args.at(0)) / 1e6;
    value("spin_ns") = static_cast<double>(args.at(0));
    ++value("spins");
    return CUDA_SUCCESS;
  }
  s.clock_ms += name == "slow" ? 20.0 : value("ms_per_launch");
  ++value("launches");
  return CUDA_SUCCESS;
}

// How many pointer parameters a built-in kernel reads.
size_t arity(const std::string& name) {
  if (name == "copy") return 2;
  if (name == "fill_one" || name == "fill_two" || name == "accumulate") return 1;
  if (name == "dc_timing_spin") return 1;  // an unsigned long long, read like a pointer
  return 0;
}

}  // namespace

extern "C" {

void dc_fake_cuda_reset() { reset(); }
void dc_fake_cuda_set(const char* key, double v) { value(key) = v; }
double dc_fake_cuda_get(const char* key) { return value(key); }

CUresult cuInit(unsigned int) { return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int* v) {
  *v = 12040;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult e, const char** s) {
  switch (e) {
    case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_IMAGE: *s = "CUDA_ERROR_INVALID_IMAGE"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; return CUDA_SUCCESS;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; return CUDA_SUCCESS;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: *s = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"; return CUDA_SUCCESS;
    default: *s = nullptr; return CUDA_ERROR_INVALID_VALUE;
  }
}
CUresult cuGetErrorString(CUresult e, const char** s) {
  *s = e == CUDA_ERROR_ILLEGAL_ADDRESS ? "an illegal memory access was encountered" : "fake error";
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* n) {
  *n = static_cast<int>(value("devices"));
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= static_cast<int>(value("devices"))) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice) {
  std::strncpy(name, "NVIDIA A100-SXM4-40GB", static_cast<size_t>(len));
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 8; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 108; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1410000; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = 1215000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = 5120; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 40 << 20; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = 167936; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 166912; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem(size_t* bytes, CUdevice) {
  *bytes = size_t{40} << 30;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice) {
  *ctx = &the_context;
  ++value("contexts");
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease(CUdevice) {
  --value("contexts");
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext) { return state().sticky; }
CUresult cuCtxSynchronize(void) { return synchronize(); }
CUresult cuMemGetInfo(size_t* free_bytes, size_t* total) {
  *total = size_t{40} << 30;
  *free_bytes = size_t{38} << 30;
  return state().sticky;
}

CUresult cuModuleLoadData(CUmodule* m, const void* image) {
  if (state().sticky) return state().sticky;
  const char* text = static_cast<const char*>(image);
  const bool ptx = std::strncmp(text, ".version", 8) == 0 || std::strncmp(text, "//", 2) == 0;
  if (!ptx && std::memcmp(image, "\x7f" "ELF", 4) != 0) return CUDA_ERROR_INVALID_IMAGE;
  if (ptx) {
    if (value("refuse_ptx") != 0) return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
    ++value("ptx_modules");
  }
  *m = new CUmod_st;
  ++value("modules");
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule m) {
  delete m;
  --value("modules");
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  if (std::strcmp(name, "missing") == 0) return CUDA_ERROR_NOT_FOUND;
  std::unique_ptr<CUfunc_st>& slot = m->functions[name];
  if (!slot) {
    const int static_smem = static_cast<int>(value("static_smem_bytes"));
    slot = std::make_unique<CUfunc_st>(CUfunc_st{name, static_smem, 48 * 1024 - static_smem});
  }
  *f = slot.get();
  return CUDA_SUCCESS;
}
// The opt-in: static plus dynamic at most the device's 163 KiB per block.
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  if (a != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES || v < 0 || v + f->static_smem > 166912)
    return CUDA_ERROR_INVALID_VALUE;
  f->max_dynamic_smem = v;
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr* p, size_t bytes) {
  if (state().sticky) return state().sticky;
  void* host = std::malloc(bytes);
  if (host == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = reinterpret_cast<CUdeviceptr>(host);
  ++value("live_allocations");
  return CUDA_SUCCESS;
}
CUresult cuMemFree(CUdeviceptr p) {
  std::free(reinterpret_cast<void*>(p));
  --value("live_allocations");
  return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t n) {
  if (const CUresult r = synchronize()) return r;
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t n) {
  if (const CUresult r = synchronize()) return r;
  std::memcpy(dst, reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8(CUdeviceptr dst, unsigned char byte, size_t n) {
  if (state().sticky) return state().sticky;
  return memset_now(dst, byte, n);
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned smem, CUstream stream, void** params,
                        void**) {
  if (state().sticky) return state().sticky;
  CUresult refused = CUDA_SUCCESS;
  if (static_cast<unsigned long long>(bx) * by * bz > 1024) refused = CUDA_ERROR_INVALID_VALUE;
  else if (static_cast<int>(smem) > f->max_dynamic_smem) refused = CUDA_ERROR_INVALID_VALUE;
  else if (f->name == "resources") refused = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  if (refused != CUDA_SUCCESS) {
    if (stream != nullptr && stream->capturing) stream->invalidated = true;
    return refused;
  }
  // Parameters are read at the call, as the real driver does (also when capturing).
  std::vector<CUdeviceptr> args(arity(f->name));
  for (size_t i = 0; i < args.size(); ++i) std::memcpy(&args[i], params[i], sizeof(CUdeviceptr));
  const size_t threads = static_cast<size_t>(gx) * gy * gz * bx * by * bz;
  const std::string name = f->name;
  return enqueue(stream, [name, threads, args] { return run_kernel(name, threads, args); });
}

CUresult cuEventCreate(CUevent* e, unsigned int) {
  *e = new CUevent_st;
  ++value("events");
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent e, CUstream) {
  if (state().sticky) return state().sticky;
  e->ms = state().clock_ms;
  e->recorded = true;
  return CUDA_SUCCESS;
}
CUresult cuEventSynchronize(CUevent) { return synchronize(); }
CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent stop) {
  if (state().sticky) return state().sticky;
  if (!start->recorded || !stop->recorded) return CUDA_ERROR_INVALID_HANDLE;
  *ms = static_cast<float>(stop->ms - start->ms);
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy(CUevent e) {
  delete e;
  --value("events");
  return CUDA_SUCCESS;
}

// A function's limit on threads per block: 1024, or the test's "max_threads_per_function"
// (as if the kernel used many registers); its static shared memory.
CUresult cuFuncGetAttribute(int* v, CUfunction_attribute a, CUfunction f) {
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: {
      const double limit = value("max_threads_per_function");
      *v = limit > 0 ? static_cast<int>(limit) : 1024;
      return CUDA_SUCCESS;
    }
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = f->static_smem; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuStreamCreate(CUstream* stream, unsigned int) {
  if (state().sticky) return state().sticky;
  *stream = new CUstream_st;
  ++value("streams");
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy(CUstream stream) {
  delete stream;
  --value("streams");
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream) { return synchronize(); }

CUresult cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode) {
  if (state().sticky) return state().sticky;
  if (stream == nullptr || stream->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  stream->capturing = true;
  stream->invalidated = false;
  stream->captured.clear();
  return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  *graph = nullptr;
  if (stream == nullptr || !stream->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  stream->capturing = false;
  if (stream->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  *graph = new CUgraph_st{std::move(stream->captured)};
  stream->captured.clear();
  ++value("graphs");
  return CUDA_SUCCESS;
}
CUresult cuGraphDestroy(CUgraph graph) {
  delete graph;
  --value("graphs");
  return CUDA_SUCCESS;
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long) {
  if (state().sticky) return state().sticky;
  *exec = new CUgraphExec_st{graph->ops};
  ++value("graph_execs");
  return CUDA_SUCCESS;
}
CUresult cuGraphExecDestroy(CUgraphExec exec) {
  delete exec;
  --value("graph_execs");
  return CUDA_SUCCESS;
}
// Replays every recorded operation; a refusal or fault shows at the next synchronisation.
CUresult cuGraphLaunch(CUgraphExec exec, CUstream) {
  if (state().sticky) return state().sticky;
  ++value("graph_launches");
  for (const FakeOp& op : exec->ops) {
    const CUresult r = op();
    if (r != CUDA_SUCCESS && !state().sticky) state().sticky = r;
  }
  return CUDA_SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char byte, size_t n, CUstream stream) {
  return enqueue(stream, [dst, byte, n] { return memset_now(dst, byte, n); });
}
CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream stream) {
  if (const CUresult r = refuse_in_capture(stream)) return r;
  return cuMemcpyHtoD(dst, src, n);
}
CUresult cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream stream) {
  if (const CUresult r = refuse_in_capture(stream)) return r;
  return cuMemcpyDtoH(dst, src, n);
}
CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  if (const CUresult r = refuse_in_capture(stream)) return r;
  if (const CUresult r = synchronize()) return r;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}

}  // extern "C"
