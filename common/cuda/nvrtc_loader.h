// NVRTC libraries found and loaded at run time (dlopen), so that one build compiles for
// every GPU some installed NVRTC targets: CUDA 13's NVRTC for sm_75 and newer, CUDA 12's for
// sm_70 (V100), which CUDA 13 dropped. dc links no NVRTC; each compile uses the newest
// library that targets its architecture (choose_nvrtc). docs/compilation.md, "Which NVRTC".
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace dc {

struct NvrtcApi;  // the entry points, resolved with dlsym (nvrtc_loader.cpp)

// One loaded libnvrtc.so.N: where it is, what it says it is, and its entry points. Loaded
// libraries stay loaded for the life of the process (NVRTC keeps state of its own).
struct NvrtcLibrary {
  std::string path;            // the file opened ("/usr/local/cuda-13.0/lib64/libnvrtc.so.13")
  int major = 0, minor = 0;    // nvrtcVersion
  std::vector<int> archs;      // nvrtcGetSupportedArchs: 70, 75, ..., ascending
  std::shared_ptr<const NvrtcApi> api;

  std::string version() const { return std::to_string(major) + "." + std::to_string(minor); }
  bool targets(int arch_number) const;
};

// The folders searched, in order (ties between equal versions go to the first):
//   the build's CUDA toolkit (CUDAToolkit_LIBRARY_DIR at configure time);
//   dc's own pip folders, /opt/dc/nvrtc-cu*/nvidia/{cuda_nvrtc,cu*}/lib (scripts/install-deps.sh);
//   /usr/local/cuda*/lib64 and /usr/local/cuda*/targets/*/lib;
//   each entry of LD_LIBRARY_PATH;
//   the active Python environment's site-packages ($VIRTUAL_ENV, else what `python3` on
//   PATH reports) /nvidia/cuda_nvrtc/lib and /nvidia/cu*/lib (pip's nvidia-cuda-nvrtc-cu12/-cu13);
//   a relocatable bundle's lib/ (the executable's ../lib, scripts/make_dist.sh --with-nvrtc).
std::vector<std::string> nvrtc_search_dirs();

// Every NVRTC in `dirs` (files named libnvrtc.so.N...; the same file or the same version
// found twice counts once), newest first. A file that does not load or lacks an entry
// point is skipped; `skipped` (if given) gets one line per such file saying why.
std::vector<NvrtcLibrary> discover_nvrtc(const std::vector<std::string>& dirs,
                                         std::vector<std::string>* skipped = nullptr);

// The newest library in `libs` that targets sm_`arch_number`; nullptr if none does.
const NvrtcLibrary* choose_nvrtc(const std::vector<NvrtcLibrary>& libs, int arch_number);

// The libraries of nvrtc_search_dirs(), discovered once per process (thread-safe).
const std::vector<NvrtcLibrary>& installed_nvrtc();

// What to install so that sm_`arch_number` gets an NVRTC: "pip install
// nvidia-cuda-nvrtc-cu12 (or scripts/install-deps.sh)" for sm_70 and older, ...
std::string nvrtc_install_hint(int arch_number);

// "12.9 (sm_50-sm_121) at PATH; 13.0 (...) at PATH", or "none found in DIR, DIR, ...".
std::string describe_nvrtc(const std::vector<NvrtcLibrary>& libs);

}  // namespace dc
