#include "nvrtc.h"

#include "nvrtc_api.h"
#include "nvrtc_loader.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "ir/join.h"
#include "ir/error.h"
#include "ir/workload.h"

namespace dc {
namespace {

// nvrtcProgram is `_nvrtcProgram*`; the deleter owns it from nvrtcCreateProgram on, and
// destroys it with the library that created it.
struct ProgramDeleter {
  const NvrtcApi* api = nullptr;
  void operator()(_nvrtcProgram* p) const noexcept { api->destroy_program(&p); }
};
using Program = std::unique_ptr<_nvrtcProgram, ProgramDeleter>;

// The name NVRTC puts in front of diagnostics: "dc_kernel.cu(12): error: ...".
constexpr const char* kProgramName = "dc_kernel.cu";

// Every architecture some installed NVRTC targets, ascending.
const std::vector<int>& supported_arch_numbers() {
  static const std::vector<int> numbers = [] {
    std::set<int> all;
    for (const auto& lib : installed_nvrtc()) all.insert(lib.archs.begin(), lib.archs.end());
    return std::vector<int>(all.begin(), all.end());
  }();
  return numbers;
}

// NN of "sm_NN", "sm_NNa" (NN >= 90) or "sm_NNf" (NN >= 100), the architecture-specific and
// family forms; -1 for anything else.
int parse_arch(const std::string& arch) {
  std::string digits = arch.size() > 3 && arch.compare(0, 3, "sm_") == 0 ? arch.substr(3) : "";
  char suffix = 0;
  if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) {
    suffix = digits.back();
    digits.pop_back();
  }
  const bool numeric = !digits.empty() && digits.size() <= 4 &&
                       std::all_of(digits.begin(), digits.end(),
                                   [](unsigned char c) { return std::isdigit(c) != 0; });
  if (!numeric) return -1;
  const int number = std::stoi(digits);
  const bool suffix_ok = suffix == 0 || (suffix == 'a' && number >= 90) || (suffix == 'f' && number >= 100);
  return suffix_ok ? number : -1;
}

// The library that compiles for `arch`: the newest installed NVRTC that targets it. A
// caller's mistake (a malformed arch, or one no installed NVRTC targets) is a UserError
// that says what is installed and what to install.
const NvrtcLibrary& library_for(const std::string& arch) {
  const int number = parse_arch(arch);
  const NvrtcLibrary* lib = number < 0 ? nullptr : choose_nvrtc(installed_nvrtc(), number);
  if (lib != nullptr) return *lib;
  const std::string supported = supported_archs().empty() ? "none" : join(supported_archs(), ", ");
  if (number < 0)
    throw_user_error("unsupported GPU architecture '", arch, "'; supported: ", supported);
  throw_user_error("unsupported GPU architecture '", arch, "': no installed NVRTC targets it (",
                   describe_nvrtc(installed_nvrtc()), "); supported: ", supported, ". ",
                   nvrtc_install_hint(number));
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

bool is_blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c) != 0; });
}

// A diagnostic line that reports an error: front end ("file(12): error: ...",
// "catastrophic error"), option parsing ("nvrtc: error: ..."), ptxas ("ptxas error   : ...",
// "ptxas fatal   : ...").
bool is_error_line(const std::string& line) {
  return line.find("): error") != std::string::npos ||
         line.find("): catastrophic error") != std::string::npos ||
         line.rfind("nvrtc: error", 0) == 0 || line.rfind("ptxas error", 0) == 0 ||
         line.rfind("ptxas fatal", 0) == 0 || line.rfind("error:", 0) == 0;
}

// A line that starts a new diagnostic ("file(12): warning ...", "ptxas info ...").
bool starts_diagnostic(const std::string& line) {
  return is_error_line(line) || line.rfind(kProgramName, 0) == 0 || line.rfind("ptxas", 0) == 0 ||
         line.rfind("Remark", 0) == 0;
}

// The first error with the source line and caret the front end prints under it, plus a
// count of the errors that follow.
std::string first_error(const std::string& log) {
  const auto lines = split_lines(log);
  std::string out;
  size_t errors = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!is_error_line(lines[i])) continue;
    if (++errors > 1) continue;
    out = lines[i];
    for (size_t j = i + 1; j < lines.size() && j <= i + 2; ++j) {
      if (is_blank(lines[j]) || starts_diagnostic(lines[j])) break;
      out += "\n" + lines[j];
    }
  }
  if (errors > 1) out += "\n(" + std::to_string(errors - 1) + " more error(s) in the log)";
  return out;
}

// The non-negative integer that ends just before `pos` in `line` (spaces skipped), or -1.
int64_t number_before(const std::string& line, size_t pos) {
  size_t end = pos;
  while (end > 0 && line[end - 1] == ' ') --end;
  size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1])) != 0) --begin;
  if (begin == end || end - begin > 18) return -1;
  return std::stoll(line.substr(begin, end - begin));
}

// The number written before `what` ("1024 bytes smem" -> 1024 for " bytes smem"), or -1.
int64_t figure(const std::string& line, const std::string& what) {
  const size_t pos = line.find(what);
  return pos == std::string::npos ? -1 : number_before(line, pos);
}

// The text between the first pair of single quotes after `prefix`, or "" if absent.
std::string quoted_after(const std::string& line, const std::string& prefix) {
  const size_t p = line.find(prefix);
  if (p == std::string::npos) return "";
  const size_t open = line.find('\'', p + prefix.size());
  const size_t close = open == std::string::npos ? open : line.find('\'', open + 1);
  return close == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  const size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

struct FrameFigures {
  int64_t stack = 0, spill_stores = 0, spill_loads = 0;
};

}  // namespace

std::string nvrtc_version() {
  const auto& libs = installed_nvrtc();
  return libs.empty() ? std::string("none") : libs.front().version();
}

std::string nvrtc_version_for(const std::string& arch) {
  const int number = parse_arch(arch);
  const NvrtcLibrary* lib = number < 0 ? nullptr : choose_nvrtc(installed_nvrtc(), number);
  return lib == nullptr ? std::string() : lib->version();
}

std::vector<std::string> supported_archs() {
  std::vector<std::string> out;
  for (int n : supported_arch_numbers()) out.push_back("sm_" + std::to_string(n));
  return out;
}

std::vector<std::string> nvrtc_options(const std::string& arch, const CompileOptions& options) {
  // A real architecture makes NVRTC run ptxas itself and hand back a CUBIN; -v makes ptxas
  // report each entry's resources into the program log.
  std::vector<std::string> opts = {"--gpu-architecture=" + arch, "--std=c++17",
                                   "--ptxas-options=-v"};
  if (options.line_info) opts.push_back("--generate-line-info");
  if (options.max_registers > 0)
    opts.push_back("--maxrregcount=" + std::to_string(options.max_registers));
  if (options.min_blocks_per_sm > 0)
    opts.push_back("--ptxas-options=--minnctapersm=" + std::to_string(options.min_blocks_per_sm));
  opts.insert(opts.end(), options.extra_flags.begin(), options.extra_flags.end());
  return opts;
}

// ptxas -v prints, per entry function (CUDA 12 and 13 alike):
//   ptxas info    : Compiling entry function 'k' for 'sm_80'
//   ptxas info    : Function properties for k
//   ptxas         .     1024 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 32 registers, used 1 barriers, 1024 bytes cumulative stack size,
//                   4096 bytes smem, 372 bytes cmem[0]
// Non-entry functions get "Function properties" lines too (kept apart by name), older
// ptxas omit the barrier and cumulative-stack parts, and the order of the blocks varies.
std::vector<KernelResources> parse_ptxas_info(const std::string& log) {
  std::vector<KernelResources> kernels;
  std::map<std::string, FrameFigures> frames;
  std::string properties_of;  // function named by the last "Function properties for"
  int current = -1;           // entry named by the last "Compiling entry function"
  for (const std::string& line : split_lines(log)) {
    if (line.find("Compiling entry function") != std::string::npos) {
      KernelResources k;
      k.kernel = quoted_after(line, "Compiling entry function");
      if (k.kernel.empty()) continue;
      kernels.push_back(k);
      current = static_cast<int>(kernels.size()) - 1;
    } else if (const size_t p = line.find("Function properties for"); p != std::string::npos) {
      properties_of = trimmed(line.substr(p + std::string("Function properties for").size()));
    } else if (line.find("bytes stack frame") != std::string::npos) {
      FrameFigures& f = frames[properties_of];
      f.stack = std::max<int64_t>(0, figure(line, "bytes stack frame"));
      f.spill_stores = std::max<int64_t>(0, figure(line, "bytes spill stores"));
      f.spill_loads = std::max<int64_t>(0, figure(line, "bytes spill loads"));
    } else if (line.find("registers") != std::string::npos && current >= 0 &&
               line.find("Used ") != std::string::npos) {
      KernelResources& k = kernels[static_cast<size_t>(current)];
      k.registers = static_cast<int>(std::max<int64_t>(0, figure(line, " registers")));
      k.static_smem_bytes = std::max<int64_t>(0, figure(line, " bytes smem"));
      k.stack_bytes = std::max({k.stack_bytes, figure(line, " bytes cumulative stack size"),
                                figure(line, " bytes lmem")});
      k.const_bytes = 0;
      for (size_t pos = line.find(" bytes cmem["); pos != std::string::npos;
           pos = line.find(" bytes cmem[", pos + 1))
        k.const_bytes += std::max<int64_t>(0, number_before(line, pos));
    }
  }
  for (KernelResources& k : kernels) {
    const auto it = frames.find(k.kernel);
    if (it == frames.end()) continue;
    k.stack_bytes = std::max(k.stack_bytes, it->second.stack);
    k.spill_stores_bytes = static_cast<int>(it->second.spill_stores);
    k.spill_loads_bytes = static_cast<int>(it->second.spill_loads);
  }
  return kernels;
}

int spilled_bytes(const std::vector<KernelResources>& kernels) {
  int bytes = 0;
  for (const auto& k : kernels) bytes += k.spill_stores_bytes + k.spill_loads_bytes;
  return bytes;
}

bool retries_spills(const CompileOptions& options) {
  return options.retry_spills && options.max_registers <= 0 && options.min_blocks_per_sm <= 0;
}

CompileOptions spill_retry_options(const CompileOptions& options) {
  CompileOptions again = options;
  again.min_blocks_per_sm = 1;
  again.retry_spills = false;
  return again;
}

namespace {

// One NVRTC compile with exactly `options` (no retry).
CompileResult compile_once(const std::string& source, const std::string& arch,
                           const CompileOptions& options) {
  const NvrtcLibrary& lib = library_for(arch);
  const NvrtcApi& api = *lib.api;
  CompileResult r;
  r.arch = arch;
  r.nvrtc_version = lib.version();
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };

  nvrtcProgram raw = nullptr;
  const nvrtcResult created =
      api.create_program(&raw, source.c_str(), kProgramName, 0, nullptr, nullptr);
  if (created != NVRTC_SUCCESS) {
    r.error = std::string("nvrtcCreateProgram failed: ") + api.error_string(created);
    r.log = r.error;
    r.compile_seconds = elapsed();
    return r;
  }
  const Program program(raw, ProgramDeleter{&api});

  const std::vector<std::string> opts = nvrtc_options(arch, options);
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  const nvrtcResult compiled =
      api.compile_program(program.get(), static_cast<int>(argv.size()), argv.data());
  r.compile_seconds = elapsed();

  size_t log_size = 0;
  if (api.program_log_size(program.get(), &log_size) == NVRTC_SUCCESS && log_size > 1) {
    std::string log(log_size, '\0');
    if (api.program_log(program.get(), log.data()) == NVRTC_SUCCESS) {
      // The log is the front end's and ptxas's logs joined, each with its own NUL.
      log.erase(std::remove(log.begin(), log.end(), '\0'), log.end());
      r.log = std::move(log);
    }
  }
  if (compiled != NVRTC_SUCCESS) {
    r.error = first_error(r.log);
    if (r.error.empty()) r.error = std::string("NVRTC: ") + api.error_string(compiled);
    return r;
  }

  size_t cubin_size = 0;
  if (api.cubin_size(program.get(), &cubin_size) != NVRTC_SUCCESS || cubin_size == 0) {
    r.error = "NVRTC compiled the program but produced no CUBIN for " + arch;
    return r;
  }
  r.cubin.resize(cubin_size);
  if (api.cubin(program.get(), r.cubin.data()) != NVRTC_SUCCESS) {
    r.cubin.clear();
    r.error = "nvrtcGetCUBIN failed for " + arch;
    return r;
  }
  if (options.keep_ptx) {
    size_t ptx_size = 0;
    if (api.ptx_size(program.get(), &ptx_size) == NVRTC_SUCCESS && ptx_size > 1) {
      r.ptx.assign(ptx_size, '\0');
      if (api.ptx(program.get(), r.ptx.data()) == NVRTC_SUCCESS)
        r.ptx.resize(ptx_size - 1);
      else
        r.ptx.clear();
    }
  }
  r.kernels = parse_ptxas_info(r.log);
  r.ok = true;
  return r;
}

}  // namespace

CompileResult compile_cuda(const std::string& source, const std::string& arch,
                           const CompileOptions& options) {
  library_for(arch);  // a caller's mistake throws before any work
  CompileResult first = compile_once(source, arch, options);
  const int spilled = first.ok ? spilled_bytes(first.kernels) : 0;
  if (spilled == 0 || !retries_spills(options)) return first;
  // ptxas spilled at a register target of its own choosing; told that one block per SM
  // suffices, it may take the few registers more that the kernel needs.
  CompileResult again = compile_once(source, arch, spill_retry_options(options));
  again.compile_seconds += first.compile_seconds;
  const std::string note = "dc: ptxas spilled " + std::to_string(spilled) +
                           " bytes with no register bound; compiled again with "
                           "--minnctapersm=1: ";
  if (!again.ok || spilled_bytes(again.kernels) >= spilled) {
    first.compile_seconds = again.compile_seconds;
    first.log += "\n" + note + "no fewer spills, first result kept\n";
    return first;
  }
  again.log = note + "kept (" + std::to_string(spilled_bytes(again.kernels)) +
              " bytes)\n" + again.log;
  return again;
}

std::vector<CompileResult> compile_for_archs(const std::string& source,
                                             const std::vector<std::string>& archs, int threads,
                                             const CompileOptions& options) {
  for (const auto& a : archs) library_for(a);  // a bad arch fails before any work starts
  std::vector<CompileResult> results(archs.size());
  std::vector<std::exception_ptr> failures(archs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < archs.size(); i = next++) {
      try {
        results[i] = compile_cuda(source, archs[i], options);
      } catch (...) {
        failures[i] = std::current_exception();
      }
    }
  };
  const size_t n = std::min(archs.size(), static_cast<size_t>(std::max(1, threads)));
  {
    std::vector<std::jthread> pool;  // joins on scope exit, also if a later start throws
    for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
    work();
  }
  for (const auto& f : failures)
    if (f) std::rethrow_exception(f);
  return results;
}

std::string compile_cache_key(const std::string& source, const std::string& arch,
                              const CompileOptions& options) {
  // Length-prefixed fields so that no two different inputs spell the same text.
  // v2: compiles that spill are retried (CompileOptions::retry_spills).
  std::string text = "dc-compile-cache-v2\n";
  auto field = [&](const std::string& name, const std::string& value) {
    text += name + " " + std::to_string(value.size()) + "\n" + value + "\n";
  };
  field("nvrtc", nvrtc_version_for(arch));
  field("arch", arch);
  for (const auto& o : nvrtc_options(arch, options)) field("option", o);
  field("keep_ptx", options.keep_ptx ? "1" : "0");
  field("retry_spills", retries_spills(options) ? "1" : "0");
  field("source", source);
  return fnv1a_hex(text);
}

}  // namespace dc
