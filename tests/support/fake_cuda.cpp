// A fake CUDA driver library for tests on machines without a GPU: it exports the entry
// points worker/cuda_driver.cpp resolves (with cuda.h's own prototypes, so the _v2 names
// come out right) and behaves like one A100-SXM4-40GB whose "device memory" is host memory
// and whose "kernels" are a few built-in behaviours chosen by name:
//   copy(in, out)     out[t] = in[t] for every thread t of the grid
//   fill_one(out)     out[t] = 1.0f;  fill_two(out): 2.0f
//   accumulate(out)   out[t] += 1.0f
//   fault             an illegal address: sticky, reported by the next synchronisation
//   resources         the launch is refused with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
//   slow              takes 20 ms instead of the usual 0.25 ms; any other name does nothing
// Each launch advances a fake clock that events read, so timing loops are deterministic.
// Tests steer and inspect it through dc_fake_cuda_reset/set/get (dlopen the same path).
#include <cuda.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

struct CUctx_st {
  int unused = 0;
};
struct CUmod_st {
  int unused = 0;
};
struct CUfunc_st {
  std::string name;
  int max_dynamic_smem = 48 * 1024;
};
struct CUevent_st {
  double ms = 0;
  bool recorded = false;
};

namespace {

struct State {
  CUresult sticky = CUDA_SUCCESS;  // once set, every call returns it
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
CUresult cuCtxSynchronize(void) { return state().sticky; }
CUresult cuMemGetInfo(size_t* free_bytes, size_t* total) {
  *total = size_t{40} << 30;
  *free_bytes = size_t{38} << 30;
  return state().sticky;
}

CUresult cuModuleLoadData(CUmodule* m, const void* image) {
  if (state().sticky) return state().sticky;
  if (std::memcmp(image, "\x7f" "ELF", 4) != 0) return CUDA_ERROR_INVALID_IMAGE;
  *m = new CUmod_st;
  ++value("modules");
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule m) {
  delete m;
  --value("modules");
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction* f, CUmodule, const char* name) {
  if (std::strcmp(name, "missing") == 0) return CUDA_ERROR_NOT_FOUND;
  // Functions live as long as the process here; a real driver frees them with the module.
  *f = new CUfunc_st{name};
  return CUDA_SUCCESS;
}
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  if (a != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES || v > 166912) return CUDA_ERROR_INVALID_VALUE;
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
  if (state().sticky) return state().sticky;
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t n) {
  if (state().sticky) return state().sticky;
  std::memcpy(dst, reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8(CUdeviceptr dst, unsigned char byte, size_t n) {
  if (state().sticky) return state().sticky;
  if (n >= kLargeMemset) {
    ++value("large_memsets");
    value("large_memset_bytes") = static_cast<double>(n);
    return CUDA_SUCCESS;
  }
  std::memset(reinterpret_cast<void*>(dst), byte, n);
  ++value("small_memsets");
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned smem, CUstream, void** params, void**) {
  State& s = state();
  if (s.sticky) return s.sticky;
  if (static_cast<unsigned long long>(bx) * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (static_cast<int>(smem) > f->max_dynamic_smem) return CUDA_ERROR_INVALID_VALUE;
  if (f->name == "resources") return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  const size_t threads = static_cast<size_t>(gx) * gy * gz * bx * by * bz;
  auto arg = [&](int i) {
    CUdeviceptr p = 0;
    std::memcpy(&p, params[i], sizeof p);
    return reinterpret_cast<float*>(p);
  };
  if (f->name == "copy") {
    for (size_t t = 0; t < threads; ++t) arg(1)[t] = arg(0)[t];
  } else if (f->name == "fill_one" || f->name == "fill_two") {
    const float v = f->name == "fill_one" ? 1.f : 2.f;
    for (size_t t = 0; t < threads; ++t) arg(0)[t] = v;
  } else if (f->name == "accumulate") {
    for (size_t t = 0; t < threads; ++t) arg(0)[t] += 1.f;
  } else if (f->name == "fault") {
    s.sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  s.clock_ms += f->name == "slow" ? 20.0 : value("ms_per_launch");
  ++value("launches");
  return CUDA_SUCCESS;
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
CUresult cuEventSynchronize(CUevent) { return state().sticky; }
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

}  // extern "C"
