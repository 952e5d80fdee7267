#include "nvrtc_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <utility>

#include "ir/error.h"
#include "nvrtc_api.h"

namespace dc {
namespace fs = std::filesystem;
namespace {

// The children of `pattern`'s parent folder whose names match `name_regex`, sorted.
std::vector<std::string> matching_children(const std::string& parent, const std::string& name_regex) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) return out;
  const std::regex re(name_regex);
  for (const auto& e : fs::directory_iterator(parent, ec))
    if (std::regex_match(e.path().filename().string(), re)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string part; std::getline(in, part, sep);)
    if (!part.empty()) out.push_back(part);
  return out;
}

// The active Python environment's import path: $VIRTUAL_ENV's site-packages, else sys.path
// as `python3` on PATH reports it (site-packages, user site, PYTHONPATH). Empty without one.
std::vector<std::string> python_paths() {
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv != nullptr && *venv != '\0')
    return matching_children(std::string(venv) + "/lib", R"(python3(\.\d+)?)");
  std::vector<std::string> out;
  FILE* p = ::popen("python3 -c 'import sys; print(\"\\n\".join(x for x in sys.path if x))' 2>/dev/null", "r");
  if (p == nullptr) return out;
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) text.append(buf, n);
  ::pclose(p);
  for (const auto& line : split(text, '\n')) out.push_back(line);
  return out;
}

// pip's NVRTC wheels: nvidia/cuda_nvrtc/lib (cu12) and nvidia/cu13/lib (cu13).
void add_pip_dirs(const std::string& site, std::vector<std::string>& dirs) {
  dirs.push_back(site + "/nvidia/cuda_nvrtc/lib");
  for (const auto& d : matching_children(site + "/nvidia", R"(cu\d+)")) dirs.push_back(d + "/lib");
}

std::string executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

template <typename F>
bool resolve(void* handle, const char* name, F& out, std::string& missing) {
  out = reinterpret_cast<F>(::dlsym(handle, name));
  if (out == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
  return out != nullptr;
}

// dlopen + dlsym of every entry point; nullptr with `why` set when the file is not an NVRTC.
std::shared_ptr<const NvrtcApi> open_api(const std::string& path, std::string& why) {
  // RTLD_LOCAL: NVRTC 12 and 13 export the same names and must not resolve to each other.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = ::dlerror();
    why = e != nullptr ? e : "dlopen failed";
    return nullptr;
  }
  auto api = std::make_shared<NvrtcApi>();
  std::string missing;
  resolve(handle, "nvrtcVersion", api->version, missing);
  resolve(handle, "nvrtcGetNumSupportedArchs", api->num_supported_archs, missing);
  resolve(handle, "nvrtcGetSupportedArchs", api->supported_archs, missing);
  resolve(handle, "nvrtcGetErrorString", api->error_string, missing);
  resolve(handle, "nvrtcCreateProgram", api->create_program, missing);
  resolve(handle, "nvrtcDestroyProgram", api->destroy_program, missing);
  resolve(handle, "nvrtcCompileProgram", api->compile_program, missing);
  resolve(handle, "nvrtcGetProgramLogSize", api->program_log_size, missing);
  resolve(handle, "nvrtcGetProgramLog", api->program_log, missing);
  resolve(handle, "nvrtcGetCUBINSize", api->cubin_size, missing);
  resolve(handle, "nvrtcGetCUBIN", api->cubin, missing);
  resolve(handle, "nvrtcGetPTXSize", api->ptx_size, missing);
  resolve(handle, "nvrtcGetPTX", api->ptx, missing);
  if (!missing.empty()) {
    why = "not an NVRTC: no " + missing;
    return nullptr;  // the handle stays open: unloading a library is never worth the risk
  }
  return api;
}

// Version and architectures of one file; false with `why` when it does not answer.
bool load_library(const std::string& path, NvrtcLibrary& lib, std::string& why) {
  lib.path = path;
  lib.api = open_api(path, why);
  if (!lib.api) return false;
  if (lib.api->version(&lib.major, &lib.minor) != NVRTC_SUCCESS) {
    why = "nvrtcVersion failed";
    return false;
  }
  int n = 0;
  if (lib.api->num_supported_archs(&n) != NVRTC_SUCCESS || n <= 0 || n > 1024) {
    why = "nvrtcGetNumSupportedArchs failed";
    return false;
  }
  lib.archs.assign(static_cast<size_t>(n), 0);
  if (lib.api->supported_archs(lib.archs.data()) != NVRTC_SUCCESS) {
    why = "nvrtcGetSupportedArchs failed";
    return false;
  }
  std::sort(lib.archs.begin(), lib.archs.end());
  return true;
}

bool newer(const NvrtcLibrary& a, const NvrtcLibrary& b) {
  return std::pair(a.major, a.minor) > std::pair(b.major, b.minor);
}

}  // namespace

bool NvrtcLibrary::targets(int arch_number) const {
  return std::binary_search(archs.begin(), archs.end(), arch_number);
}

std::vector<std::string> nvrtc_search_dirs() {
  std::vector<std::string> dirs;
#ifdef DC_CUDA_LIB_DIR
  dirs.push_back(DC_CUDA_LIB_DIR);
#endif
  for (const auto& pip : matching_children("/opt/dc", R"(nvrtc-cu\d+)")) add_pip_dirs(pip, dirs);
  for (const auto& cuda : matching_children("/usr/local", R"(cuda(-[0-9.]+)?)")) {
    dirs.push_back(cuda + "/lib64");
    for (const auto& t : matching_children(cuda + "/targets", ".*")) dirs.push_back(t + "/lib");
  }
  if (const char* ld = std::getenv("LD_LIBRARY_PATH"); ld != nullptr)
    for (const auto& d : split(ld, ':')) dirs.push_back(d);
  for (const auto& site : python_paths()) add_pip_dirs(site, dirs);
  if (const std::string exe = executable_dir(); !exe.empty()) dirs.push_back(exe + "/../lib");
  return dirs;
}

std::vector<NvrtcLibrary> discover_nvrtc(const std::vector<std::string>& dirs, std::vector<std::string>* skipped) {
  std::vector<NvrtcLibrary> libs;
  std::set<std::string> seen_files;
  for (const auto& dir : dirs) {
    for (const auto& path : matching_children(dir, R"(libnvrtc\.so\.\d+(\.\d+)*)")) {
      std::error_code ec;
      const std::string real = fs::canonical(path, ec).string();
      if (ec || !seen_files.insert(real).second) continue;
      NvrtcLibrary lib;
      std::string why;
      if (!load_library(path, lib, why)) {
        if (skipped != nullptr) skipped->push_back(path + ": " + why);
        continue;
      }
      const bool same_version = std::any_of(libs.begin(), libs.end(), [&](const NvrtcLibrary& l) {
        return l.major == lib.major && l.minor == lib.minor;
      });
      if (!same_version) libs.push_back(std::move(lib));
    }
  }
  std::stable_sort(libs.begin(), libs.end(), newer);
  return libs;
}

const NvrtcLibrary* choose_nvrtc(const std::vector<NvrtcLibrary>& libs, int arch_number) {
  const NvrtcLibrary* best = nullptr;
  for (const auto& l : libs)
    if (l.targets(arch_number) && (best == nullptr || newer(l, *best))) best = &l;
  return best;
}

const std::vector<NvrtcLibrary>& installed_nvrtc() {
  static const std::vector<NvrtcLibrary> libs = discover_nvrtc(nvrtc_search_dirs());
  return libs;
}

std::string nvrtc_install_hint(int arch_number) {
  if (arch_number < 50) return str_cat("sm_", arch_number, " is older than any NVRTC 12 or 13 targets");
  if (arch_number < 75)
    return str_cat("sm_", arch_number, " needs NVRTC 12 (CUDA 13 dropped it): `pip install "
                   "nvidia-cuda-nvrtc-cu12` in the active Python environment, or "
                   "scripts/install-deps.sh (installs it into /opt/dc/nvrtc-cu12), or a CUDA 12 "
                   "toolkit under /usr/local/cuda-12.x");
  return str_cat("sm_", arch_number, " needs a newer NVRTC: `pip install nvidia-cuda-nvrtc-cu13` "
                 "in the active Python environment, or a newer CUDA toolkit under /usr/local");
}

std::string describe_nvrtc(const std::vector<NvrtcLibrary>& libs) {
  if (libs.empty()) {
    std::string dirs;
    for (const auto& d : nvrtc_search_dirs()) dirs += (dirs.empty() ? "" : ", ") + d;
    return "no NVRTC found (searched " + dirs + ")";
  }
  std::string out;
  for (const auto& l : libs)
    out += str_cat(out.empty() ? "" : "; ", "NVRTC ", l.version(), " (sm_", l.archs.front(), "-sm_",
                   l.archs.back(), ") at ", l.path);
  return out;
}

}  // namespace dc
