#include "opencl_compile.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include "ir/workload.h"

extern char** environ;

namespace dc {

namespace {

namespace fs = std::filesystem;

bool read_file(const fs::path& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

bool write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  out.close();
  return static_cast<bool>(out);
}

// Runs argv (stdin /dev/null, stdout+stderr to `log`); the exit status, -1 if it did not
// start or exit normally (then *why says why).
int run(const std::vector<std::string>& argv, const fs::path& log, std::string* why) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    *why = std::string("cannot run ") + argv[0] + ": " + std::strerror(rc);
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string unique_suffix() {
  static std::atomic<unsigned long long> counter{0};
  return std::to_string(getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

bool on_path(const std::string& exe) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string d;
  while (std::getline(dirs, d, ':'))
    if (!d.empty() && access((fs::path(d) / exe).c_str(), X_OK) == 0) return true;
  return false;
}

// LLVM's characters of an unquoted identifier (after '@' or '%').
bool is_llvm_ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '$' || c == '.' || c == '_';
}

// The names of the module's kernels: `define ... spir_kernel ... @NAME(`.
std::set<std::string> kernel_names(const std::string& ir) {
  std::set<std::string> out;
  std::istringstream lines(ir);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("define ", 0) != 0 || line.find(" spir_kernel ") == std::string::npos) continue;
    const size_t at = line.find('@');
    if (at == std::string::npos) continue;
    size_t e = at + 1;
    while (e < line.size() && is_llvm_ident_char(line[e])) ++e;
    out.insert(line.substr(at + 1, e - at - 1));
  }
  return out;
}

}  // namespace

std::string name_kernel_locals(const std::string& ir) {
  // C++ for OpenCL names a kernel's `__local` variable as a C++ function-local static,
  // `_ZZ<len><kernel>E<len><name>` (an internal addrspace(3) global); OpenCL C names it
  // `<kernel>.<name>`, and that prefix is how PoCL tells a work-group's automatic locals from
  // program-scope variables. Without it PoCL gives every concurrently running work-group the
  // same copy, and work-groups on different threads overwrite each other's local memory.
  const std::set<std::string> kernels = kernel_names(ir);
  std::map<std::string, std::string> renamed;
  std::istringstream lines(ir);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("@_ZZ", 0) != 0 || line.find(" addrspace(3) global ") == std::string::npos ||
        line.find(" = internal ") == std::string::npos)
      continue;
    size_t e = 1;
    while (e < line.size() && is_llvm_ident_char(line[e])) ++e;
    const std::string name = line.substr(1, e - 1);
    size_t p = 3, len = 0;
    while (p < name.size() && std::isdigit(static_cast<unsigned char>(name[p]))) len = len * 10 + (name[p++] - '0');
    if (len == 0 || p + len >= name.size() || name[p + len] != 'E') continue;
    const std::string kernel = name.substr(p, len);
    if (kernels.count(kernel) != 0) renamed[name] = kernel + "." + name;
  }
  if (renamed.empty()) return ir;
  std::string out;
  out.reserve(ir.size() + renamed.size() * 64);
  for (size_t i = 0; i < ir.size();) {
    if (ir[i] == '@') {
      size_t e = i + 1;
      while (e < ir.size() && is_llvm_ident_char(ir[e])) ++e;
      if (const auto it = renamed.find(ir.substr(i + 1, e - i - 1)); it != renamed.end()) {
        out += '@' + it->second;
        i = e;
        continue;
      }
    }
    out += ir[i++];
  }
  return out;
}

std::string opencl_clang_for(const std::string& platform_version) {
  std::smatch m;
  static const std::regex llvm("LLVM ([0-9]+)");
  if (std::regex_search(platform_version, m, llvm)) {
    const std::string exe = "clang-" + m[1].str();
    if (on_path(exe)) return exe;
  }
  if (platform_version.empty())
    for (int v = 20; v >= 14; --v)
      if (on_path("clang-" + std::to_string(v))) return "clang-" + std::to_string(v);
  return "clang";
}

std::vector<std::string> opencl_clang_flags() {
  return {"-cl-std=clc++2021", "-Xclang", "-cl-ext=+__opencl_c_generic_address_space", "-target", "spir64",
          "-emit-llvm", "-O2", "-w", "-x", "clcpp"};
}

std::string clang_version(const std::string& clang) {
  static std::mutex mu;
  static std::map<std::string, std::string> known;
  std::lock_guard lock(mu);
  if (auto it = known.find(clang); it != known.end()) return it->second;
  const fs::path log = fs::temp_directory_path() / ("dc-clang-version-" + unique_suffix());
  std::string why, out;
  if (run({clang, "--version"}, log, &why) == 0) read_file(log, out);
  std::error_code ec;
  fs::remove(log, ec);
  out = out.substr(0, out.find('\n'));
  return known[clang] = out;
}

OpenClCompileResult compile_opencl(const std::string& cl_source, const std::string& clang,
                                   const std::string& cache_dir) {
  OpenClCompileResult r;
  const auto start = std::chrono::steady_clock::now();
  std::string flags;
  for (const auto& f : opencl_clang_flags()) flags += f + " ";
  flags += "| kernel locals named <kernel>.<name>";  // bitcode of earlier versions lacks it
  const std::string key = fnv1a_hex(clang_version(clang) + "\n" + flags + "\n" + cl_source) +
                          fnv1a_hex(cl_source + flags);
  std::error_code ec;
  fs::path cached;
  if (!cache_dir.empty()) {
    fs::create_directories(fs::path(cache_dir) / "opencl", ec);
    cached = fs::path(cache_dir) / "opencl" / (key + ".bc");
    std::string bytes;
    if (!ec && read_file(cached, bytes) && !bytes.empty()) {
      r.ok = true;
      r.from_cache = true;
      r.binary.assign(bytes.begin(), bytes.end());
      return r;
    }
  }
  const fs::path tmp = fs::temp_directory_path() / ("dc-opencl-" + unique_suffix());
  fs::create_directories(tmp, ec);
  const fs::path src = tmp / "kernel.clcpp", ll = tmp / "kernel.ll", named = tmp / "named.ll",
                 bc = tmp / "kernel.bc", log = tmp / "clang.log";
  // Source to textual IR, the kernels' locals renamed (name_kernel_locals), then to bitcode.
  std::vector<std::string> argv = {clang};
  for (const auto& f : opencl_clang_flags()) argv.push_back(f);
  argv.insert(argv.end(), {"-S", src.string(), "-o", ll.string()});
  const std::vector<std::string> assemble = {clang, "-target", "spir64", "-x", "ir", "-c", "-emit-llvm", "-O0",
                                             named.string(), "-o", bc.string()};
  std::string why, bytes, text;
  int status = 0;
  if (!write_file(src, cl_source)) {
    r.error = "cannot write " + src.string();
  } else if (status = run(argv, log, &why); status != 0) {
    read_file(log, r.error);
    if (r.error.empty()) r.error = why.empty() ? clang + " failed" : why;
  } else if (!read_file(ll, text) || !write_file(named, name_kernel_locals(text))) {
    r.error = clang + " wrote no IR";
  } else if (status = run(assemble, log, &why); status != 0) {
    read_file(log, r.error);
    r.error = "assembling the IR: " + (r.error.empty() ? (why.empty() ? clang + " failed" : why) : r.error);
  } else if (!read_file(bc, bytes) || bytes.empty()) {
    r.error = clang + " wrote no bitcode";
  } else {
    r.ok = true;
    r.binary.assign(bytes.begin(), bytes.end());
    if (!cached.empty()) {
      const fs::path part = cached.string() + ".part" + unique_suffix();
      if (write_file(part, bytes)) fs::rename(part, cached, ec);
    }
  }
  fs::remove_all(tmp, ec);
  r.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace dc
