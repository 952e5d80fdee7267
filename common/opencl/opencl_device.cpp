#include "opencl_device.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "ir/error.h"
#include "ir/workload.h"
#include "opencl_impl.h"

namespace dc::ocl {

ClError::ClError(const std::string& what, cl_int c) : std::runtime_error(what), code(c) {}

const char* error_name(cl_int code) {
  switch (code) {
    case CL_SUCCESS: return "CL_SUCCESS";
    case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
    case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
    case CL_INVALID_BINARY: return "CL_INVALID_BINARY";
    case CL_INVALID_BUILD_OPTIONS: return "CL_INVALID_BUILD_OPTIONS";
    case CL_INVALID_PROGRAM_EXECUTABLE: return "CL_INVALID_PROGRAM_EXECUTABLE";
    case CL_INVALID_KERNEL_NAME: return "CL_INVALID_KERNEL_NAME";
    case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_ARG_INDEX: return "CL_INVALID_ARG_INDEX";
    case CL_INVALID_ARG_SIZE: return "CL_INVALID_ARG_SIZE";
    case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_WORK_ITEM_SIZE: return "CL_INVALID_WORK_ITEM_SIZE";
    case CL_INVALID_GLOBAL_WORK_SIZE: return "CL_INVALID_GLOBAL_WORK_SIZE";
    case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
    case CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST: return "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST";
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "CL error";
  }
}

void check(cl_int code, const char* what) {
  if (code != CL_SUCCESS) throw ClError(fmt::format("{} failed: {} ({})", what, error_name(code), code), code);
}

namespace {

std::string device_string(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  clGetDeviceInfo(d, what, n, s.data(), nullptr);
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string platform_string(cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  if (clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  clGetPlatformInfo(p, what, n, s.data(), nullptr);
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

template <class T>
T device_value(cl_device_id d, cl_device_info what) {
  T v{};
  clGetDeviceInfo(d, what, sizeof v, &v, nullptr);
  return v;
}

struct Found {
  cl_platform_id platform;
  cl_device_id device;
};

std::vector<Found> all_devices(std::string* why_none) {
  cl_uint np = 0;
  const cl_int rc = clGetPlatformIDs(0, nullptr, &np);
  if (rc != CL_SUCCESS || np == 0) {
    if (why_none) *why_none = rc == CL_SUCCESS ? "no OpenCL platform" : str_cat("no OpenCL platform (", error_name(rc), ")");
    return {};
  }
  std::vector<cl_platform_id> platforms(np);
  clGetPlatformIDs(np, platforms.data(), nullptr);
  std::vector<Found> out;
  for (cl_platform_id p : platforms) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
    std::vector<cl_device_id> ds(nd);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, ds.data(), nullptr);
    for (cl_device_id d : ds) out.push_back({p, d});
  }
  if (out.empty() && why_none) *why_none = "no OpenCL device";
  return out;
}

DeviceInfo describe_found(const Found& f, int index, const GpuCatalog& catalog) {
  DeviceInfo i;
  i.index = index;
  i.name = device_string(f.device, CL_DEVICE_NAME);
  i.vendor = device_string(f.device, CL_DEVICE_VENDOR);
  i.driver_version = device_string(f.device, CL_DRIVER_VERSION);
  i.device_version = device_string(f.device, CL_DEVICE_VERSION);
  i.platform_name = platform_string(f.platform, CL_PLATFORM_NAME);
  i.platform_version = platform_string(f.platform, CL_PLATFORM_VERSION);
  i.is_cpu = (device_value<cl_device_type>(f.device, CL_DEVICE_TYPE) & CL_DEVICE_TYPE_CPU) != 0;
  i.compute_units = static_cast<int>(device_value<cl_uint>(f.device, CL_DEVICE_MAX_COMPUTE_UNITS));
  i.clock_mhz = static_cast<int>(device_value<cl_uint>(f.device, CL_DEVICE_MAX_CLOCK_FREQUENCY));
  i.global_mem_bytes = device_value<cl_ulong>(f.device, CL_DEVICE_GLOBAL_MEM_SIZE);
  i.local_mem_bytes = device_value<cl_ulong>(f.device, CL_DEVICE_LOCAL_MEM_SIZE);
  i.max_work_group = static_cast<int64_t>(device_value<size_t>(f.device, CL_DEVICE_MAX_WORK_GROUP_SIZE));
  i.preferred_vector_float = static_cast<int>(device_value<cl_uint>(f.device, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT));
  const std::string ext = device_string(f.device, CL_DEVICE_EXTENSIONS);
  i.fp16 = ext.find("cl_khr_fp16") != std::string::npos;
  i.spir = ext.find("cl_khr_spir") != std::string::npos;
  if (i.is_cpu) host_cpu_figures(&i.simd_fp32_lanes, &i.fma_units);
  i.gpu_type = device_type_for(i, catalog);
  return i;
}

}  // namespace

void host_cpu_figures(int* simd_fp32_lanes, int* fma_units) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      flags = " " + line.substr(line.find(':') + 1) + " ";
      break;
    }
  auto has = [&](const char* f) { return flags.find(std::string(" ") + f + " ") != std::string::npos; };
  *simd_fp32_lanes = has("avx512f") ? 16 : (has("avx2") || has("avx")) ? 8 : 4;
  *fma_units = has("fma") ? 2 : 1;
}

std::string device_type_for(const DeviceInfo& d, const GpuCatalog& catalog) {
  if (d.is_cpu && d.platform_name.find("Portable Computing Language") != std::string::npos)
    return catalog.find("pocl-cpu") ? "pocl-cpu" : "";
  for (const GpuSpec& s : catalog.all()) {
    if (s.api != "opencl") continue;
    for (const std::string& p : s.device_patterns)
      if (d.name.find(p) != std::string::npos) return s.name;
  }
  return "";
}

double fp32_peak_flops(const DeviceInfo& d) {
  const int lanes = d.is_cpu ? d.simd_fp32_lanes * d.fma_units : 0;
  return 2.0 * d.compute_units * lanes * d.clock_mhz * 1e6;
}

std::string describe(const DeviceInfo& d) {
  return fmt::format("{}: {} ({}, {} CUs, {} MHz{}{})", d.gpu_type.empty() ? "(no table entry)" : d.gpu_type, d.name,
                     d.platform_version, d.compute_units, d.clock_mhz,
                     d.is_cpu ? fmt::format(", {}x{} fp32 lanes", d.simd_fp32_lanes, d.fma_units) : "",
                     d.spir ? "" : ", no cl_khr_spir: cannot build dc's kernels");
}

std::vector<DeviceInfo> list_devices(const GpuCatalog& catalog, std::string* why_none) {
  std::vector<DeviceInfo> out;
  int index = 0;
  for (const Found& f : all_devices(why_none)) out.push_back(describe_found(f, index++, catalog));
  return out;
}

Device::Device(const GpuCatalog& catalog, int index) : impl_(std::make_unique<Impl>()) {
  std::string why;
  const std::vector<Found> found = all_devices(&why);
  DC_USER_CHECK(index >= 0 && static_cast<size_t>(index) < found.size(), "no OpenCL device ", index,
                found.empty() ? " (" + why + ")" : str_cat(" (this machine has ", found.size(), ")"));
  info_ = describe_found(found[static_cast<size_t>(index)], index, catalog);
  impl_->device = found[static_cast<size_t>(index)].device;
  cl_int rc = CL_SUCCESS;
  impl_->context.reset(clCreateContext(nullptr, 1, &impl_->device, nullptr, nullptr, &rc));
  check(rc, "clCreateContext");
  const cl_queue_properties props[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
  impl_->queue.reset(clCreateCommandQueueWithProperties(impl_->context.get(), impl_->device, props, &rc));
  check(rc, "clCreateCommandQueueWithProperties");
}

Device::~Device() = default;

Program build_spir(Device& device, const std::vector<char>& bitcode, std::string* log) {
  Device::Impl& d = device.impl();
  const size_t size = bitcode.size();
  const auto* bytes = reinterpret_cast<const unsigned char*>(bitcode.data());
  cl_int status = CL_SUCCESS, rc = CL_SUCCESS;
  Program p(clCreateProgramWithBinary(d.context.get(), 1, &d.device, &size, &bytes, &status, &rc));
  if (rc != CL_SUCCESS || status != CL_SUCCESS) {
    *log = str_cat("clCreateProgramWithBinary: ", error_name(rc != CL_SUCCESS ? rc : status));
    return nullptr;
  }
  rc = clBuildProgram(p.get(), 1, &d.device, "-x spir -spir-std=1.2", nullptr, nullptr);
  if (rc != CL_SUCCESS) {
    size_t n = 0;
    clGetProgramBuildInfo(p.get(), d.device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
    std::string text(n, '\0');
    clGetProgramBuildInfo(p.get(), d.device, CL_PROGRAM_BUILD_LOG, n, text.data(), nullptr);
    *log = str_cat("clBuildProgram: ", error_name(rc), "\n", text);
    return nullptr;
  }
  return p;
}

std::shared_ptr<std::remove_pointer_t<cl_program>> cached_program(Device& device, const std::vector<char>& bitcode,
                                                                   std::string* log) {
  auto& cache = device.impl().programs;
  const std::string key = fnv1a_hex(std::string(bitcode.begin(), bitcode.end())) + std::to_string(bitcode.size());
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  Program p = build_spir(device, bitcode, log);
  if (!p) return nullptr;
  if (cache.size() >= 64) cache.clear();
  return cache[key] = std::shared_ptr<std::remove_pointer_t<cl_program>>(p.release(), ReleaseProgram{});
}

Mem create_buffer(Device& device, size_t bytes) {
  cl_int rc = CL_SUCCESS;
  Mem m(clCreateBuffer(device.impl().context.get(), CL_MEM_READ_WRITE, std::max<size_t>(bytes, 1), nullptr, &rc));
  check(rc, "clCreateBuffer");
  return m;
}

double event_us(cl_event start, cl_event end) {
  cl_ulong t0 = 0, t1 = 0;
  check(clGetEventProfilingInfo(start, CL_PROFILING_COMMAND_START, sizeof t0, &t0, nullptr),
        "clGetEventProfilingInfo");
  check(clGetEventProfilingInfo(end, CL_PROFILING_COMMAND_END, sizeof t1, &t1, nullptr), "clGetEventProfilingInfo");
  return static_cast<double>(t1 - t0) * 1e-3;
}

double probe_bandwidth_gbs(Device& device) {
  // OpenCL C (no SPIR needed): every device that compiles source runs it.
  static const char* kCopy =
      "__kernel void dc_copy(__global const float4* a, __global float4* b) {"
      "  size_t i = get_global_id(0); b[i] = a[i]; }";
  try {
    Device::Impl& d = device.impl();
    cl_int rc = CL_SUCCESS;
    Program p(clCreateProgramWithSource(d.context.get(), 1, &kCopy, nullptr, &rc));
    check(rc, "clCreateProgramWithSource");
    check(clBuildProgram(p.get(), 1, &d.device, "", nullptr, nullptr), "clBuildProgram");
    Kernel k(clCreateKernel(p.get(), "dc_copy", &rc));
    check(rc, "clCreateKernel");
    const size_t bytes = size_t{64} << 20, n = bytes / 16;
    Mem a = create_buffer(device, bytes), b = create_buffer(device, bytes);
    const float zero = 0.f;
    check(clEnqueueFillBuffer(d.queue.get(), a.get(), &zero, sizeof zero, 0, bytes, 0, nullptr, nullptr), "fill");
    cl_mem args[] = {a.get(), b.get()};
    for (cl_uint i = 0; i < 2; ++i) check(clSetKernelArg(k.get(), i, sizeof(cl_mem), &args[i]), "clSetKernelArg");
    double best = 1e30;
    for (int run = 0; run < 4; ++run) {
      cl_event e = nullptr;
      const size_t local = 64;
      check(clEnqueueNDRangeKernel(d.queue.get(), k.get(), 1, nullptr, &n, &local, 0, nullptr, &e), "enqueue");
      Event ev(e);
      check(clWaitForEvents(1, &e), "clWaitForEvents");
      if (run > 0) best = std::min(best, event_us(e, e));
    }
    return 2.0 * static_cast<double>(bytes) / (best * 1e-6) / 1e9;
  } catch (const ClError&) {
    return 0;
  }
}

}  // namespace dc::ocl
