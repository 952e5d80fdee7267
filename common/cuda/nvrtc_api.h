// The NVRTC entry points dc calls, as pointers into one dlopen'ed libnvrtc (nvrtc_loader.h).
// Declarations come from the build's CUDA toolkit header; the NVRTC 12 and 13 functions used
// here have the same signatures. Internal to nvrtc.cpp and nvrtc_loader.cpp.
#pragma once

// The toolkit's header, by full path (codegen/CMakeLists.txt): <nvrtc.h> would find ours.
#include DC_CUDA_NVRTC_H

namespace dc {

struct NvrtcApi {
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetNumSupportedArchs) num_supported_archs = nullptr;
  decltype(&::nvrtcGetSupportedArchs) supported_archs = nullptr;
  decltype(&::nvrtcGetErrorString) error_string = nullptr;
  decltype(&::nvrtcCreateProgram) create_program = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy_program = nullptr;
  decltype(&::nvrtcCompileProgram) compile_program = nullptr;
  decltype(&::nvrtcGetProgramLogSize) program_log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) program_log = nullptr;
  decltype(&::nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) cubin = nullptr;
  decltype(&::nvrtcGetPTXSize) ptx_size = nullptr;
  decltype(&::nvrtcGetPTX) ptx = nullptr;
};

}  // namespace dc
