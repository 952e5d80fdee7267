// The OpenCL handles behind ocl::Device, with a unique_ptr and deleter for each C handle, and
// the error type of the OpenCL calls: private to worker/opencl_*.cpp and the runtime backend.
#pragma once

#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "opencl_device.h"

namespace dc::ocl {

// An OpenCL call that failed: the call and CL's error name.
class ClError : public std::runtime_error {
 public:
  ClError(const std::string& what, cl_int code);
  cl_int code;
};

const char* error_name(cl_int code);
// Throws ClError unless `code` is CL_SUCCESS.
void check(cl_int code, const char* what);

struct ReleaseMem { void operator()(cl_mem m) const { clReleaseMemObject(m); } };
struct ReleaseProgram { void operator()(cl_program p) const { clReleaseProgram(p); } };
struct ReleaseKernel { void operator()(cl_kernel k) const { clReleaseKernel(k); } };
struct ReleaseEvent { void operator()(cl_event e) const { clReleaseEvent(e); } };
struct ReleaseQueue { void operator()(cl_command_queue q) const { clReleaseCommandQueue(q); } };
struct ReleaseContext { void operator()(cl_context c) const { clReleaseContext(c); } };
using Mem = std::unique_ptr<std::remove_pointer_t<cl_mem>, ReleaseMem>;
using Program = std::unique_ptr<std::remove_pointer_t<cl_program>, ReleaseProgram>;
using Kernel = std::unique_ptr<std::remove_pointer_t<cl_kernel>, ReleaseKernel>;
using Event = std::unique_ptr<std::remove_pointer_t<cl_event>, ReleaseEvent>;
using Queue = std::unique_ptr<std::remove_pointer_t<cl_command_queue>, ReleaseQueue>;
using Context = std::unique_ptr<std::remove_pointer_t<cl_context>, ReleaseContext>;

struct Device::Impl {
  cl_device_id device = nullptr;
  Context context;
  Queue queue;  // in order, CL_QUEUE_PROFILING_ENABLE
  // Programs built from SPIR, by a hash of the bitcode: a reference kernel checks every
  // variant of its workload, and a variant is checked, then timed (PoCL's build of SPIR
  // takes about a second, and its kernel cache does not keep SPIR builds).
  std::map<std::string, std::shared_ptr<std::remove_pointer_t<cl_program>>> programs;
};

// A program built from SPIR bitcode (codegen/opencl_compile.h) with clBuildProgram. On a
// build failure: null, and *log holds the build log.
Program build_spir(Device& device, const std::vector<char>& bitcode, std::string* log);

// build_spir through the device's program cache (at most 64 programs kept).
std::shared_ptr<std::remove_pointer_t<cl_program>> cached_program(Device& device, const std::vector<char>& bitcode,
                                                                   std::string* log);

// A device buffer of `bytes` bytes (at least 1).
Mem create_buffer(Device& device, size_t bytes);

// Start-to-end time of a profiled event, in microseconds.
double event_us(cl_event start, cl_event end);

}  // namespace dc::ocl
