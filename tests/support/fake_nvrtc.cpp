// A fake NVRTC for the loader's tests (common/cuda/nvrtc_loader.h): it exports the entry points
// the loader resolves and answers nvrtcVersion with FAKE_NVRTC_MAJOR.FAKE_NVRTC_MINOR and
// nvrtcGetSupportedArchs with FAKE_NVRTC_ARCHS (compile definitions; tests/CMakeLists.txt
// builds it as a CUDA 12-like and a CUDA 13-like library). It compiles nothing: every
// program call fails with NVRTC_ERROR_PROGRAM_CREATION_FAILURE (4).
#include <cstddef>

namespace {
const int kArchs[] = {FAKE_NVRTC_ARCHS};
constexpr int kFailure = 4;
}  // namespace

extern "C" {
__attribute__((visibility("default"))) int nvrtcVersion(int* major, int* minor) {
  *major = FAKE_NVRTC_MAJOR;
  *minor = FAKE_NVRTC_MINOR;
  return 0;
}
__attribute__((visibility("default"))) int nvrtcGetNumSupportedArchs(int* n) {
  *n = static_cast<int>(sizeof kArchs / sizeof kArchs[0]);
  return 0;
}
__attribute__((visibility("default"))) int nvrtcGetSupportedArchs(int* archs) {
  for (size_t i = 0; i < sizeof kArchs / sizeof kArchs[0]; ++i) archs[i] = kArchs[i];
  return 0;
}
__attribute__((visibility("default"))) const char* nvrtcGetErrorString(int) { return "fake NVRTC"; }
__attribute__((visibility("default"))) int nvrtcCreateProgram(void**, const char*, const char*, int,
                                                              const char* const*, const char* const*) {
  return kFailure;
}
__attribute__((visibility("default"))) int nvrtcDestroyProgram(void**) { return kFailure; }
__attribute__((visibility("default"))) int nvrtcCompileProgram(void*, int, const char* const*) { return kFailure; }
__attribute__((visibility("default"))) int nvrtcGetProgramLogSize(void*, size_t*) { return kFailure; }
__attribute__((visibility("default"))) int nvrtcGetProgramLog(void*, char*) { return kFailure; }
__attribute__((visibility("default"))) int nvrtcGetCUBINSize(void*, size_t*) { return kFailure; }
__attribute__((visibility("default"))) int nvrtcGetCUBIN(void*, char*) { return kFailure; }
__attribute__((visibility("default"))) int nvrtcGetPTXSize(void*, size_t*) { return kFailure; }
#ifndef FAKE_NVRTC_NO_PTX  // a library without this entry point is not an NVRTC
__attribute__((visibility("default"))) int nvrtcGetPTX(void*, char*) { return kFailure; }
#endif
}
