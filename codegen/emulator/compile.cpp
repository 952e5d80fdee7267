#include "emulator/compile.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

extern char** environ;

namespace dc::emu {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string>& required_flags() {
  static const std::vector<std::string> flags = [] {
    std::vector<std::string> f = {"-shared", "-fPIC", "-fvisibility=hidden"};
    // Kernels call fmaf() for every FMA: without -mfma each is a call into libm (a third of a
    // large GEMM's emulation). The result is the same single rounding either way, and
    // contraction stays off so that a*b+c is never fused where the source did not ask.
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("fma")) {
      f.emplace_back("-mfma");
      f.emplace_back("-ffp-contract=off");
    }
#endif
    return f;
  }();
  return flags;
}

// FNV-1a, twice with different offsets: 128 bits of cache key. The cache also compares the
// stored text, so a collision costs a recompile, never a wrong kernel.
std::string text_hash(const std::string& text) {
  uint64_t a = 14695981039346656037ull, b = 0x84222325cbf29ce4ull;
  for (unsigned char c : text) {
    a = (a ^ c) * 1099511628211ull;
    b = (b ^ c) * 1099511628211ull;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

bool read_file(const fs::path& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return static_cast<bool>(in) || in.eof();
}

bool write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return false;
  out << text;
  out.close();
  return static_cast<bool>(out);
}

std::string unique_suffix() {
  static std::atomic<unsigned long long> counter{0};
  return std::to_string(getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

struct ProcessResult {
  int status = -1;         // exit status, -1 if it did not exit normally
  std::string output;      // stdout and stderr
  std::string spawn_error; // why it could not start
};

ProcessResult run_process(const std::vector<std::string>& argv, const fs::path& log) {
  ProcessResult result;
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
    result.spawn_error = std::strerror(rc);
    return result;
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) {
      result.spawn_error = std::string("waitpid: ") + std::strerror(errno);
      return result;
    }
  }
  if (WIFEXITED(wstatus)) result.status = WEXITSTATUS(wstatus);
  read_file(log, result.output);
  return result;
}

std::string command_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

// A fresh private directory under the system's temporary directory, or "".
std::string make_temp_dir() {
  std::error_code ec;
  std::string pattern = (fs::temp_directory_path(ec) / "dc-emulator-XXXXXX").string();
  if (ec) pattern = "/tmp/dc-emulator-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  return mkdtemp(buf.data()) != nullptr ? std::string(buf.data()) : std::string();
}

}  // namespace

CompiledLibrary compile_library(const std::string& source, const EmulatorOptions& options) {
  CompiledLibrary result;
  std::vector<std::string> command = {options.compiler};
  command.insert(command.end(), options.flags.begin(), options.flags.end());
  command.insert(command.end(), required_flags().begin(), required_flags().end());
  // The command is part of the text, hence of the key: other flags, other library.
  const std::string text = "// dc emulator: " + command_line(command) + "\n" + source;
  const std::string hash = text_hash(text);

  fs::path dir = options.cache_dir.empty() ? fs::path(default_emulator_cache_dir())
                                           : fs::path(options.cache_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path library = dir / (hash + ".so");
  const fs::path stored_text = dir / (hash + ".cu");
  std::string cached;
  if (fs::exists(library, ec) && read_file(stored_text, cached) && cached == text) {
    result.path = library.string();
    result.from_cache = true;
    return result;
  }

  const std::string stem = hash + "." + unique_suffix();
  fs::path source_file = dir / (stem + ".cu");
  if (!write_file(source_file, text)) {
    // Unwritable cache: compile in a private temporary directory, removed after use.
    result.temp_dir = make_temp_dir();
    if (result.temp_dir.empty()) {
      result.error = "emulator: cannot write to the cache directory '" + dir.string() +
                     "' nor create a temporary directory";
      return result;
    }
    dir = result.temp_dir;
    source_file = dir / (stem + ".cu");
    if (!write_file(source_file, text)) {
      result.error = "emulator: cannot write " + source_file.string();
      return result;
    }
  }
  const fs::path object = dir / (stem + ".so");
  const fs::path log = dir / (stem + ".log");
  command.push_back("-o");
  command.push_back(object.string());
  command.push_back("-x");  // .cu is not a C++ suffix to the compiler driver
  command.push_back("c++");
  command.push_back(source_file.string());
  const ProcessResult run = run_process(command, log);
  fs::remove(log, ec);
  if (!run.spawn_error.empty() || run.status != 0) {
    fs::remove(source_file, ec);
    fs::remove(object, ec);
    if (!run.spawn_error.empty()) {
      result.error = "cannot run the host compiler '" + options.compiler + "': " + run.spawn_error;
      return result;
    }
    std::string message = run.output;
    constexpr size_t kMaxMessage = 16000;
    if (message.size() > kMaxMessage)
      message = message.substr(0, kMaxMessage) + "\n[... " +
                std::to_string(message.size() - kMaxMessage) + " more bytes]";
    result.error = "host compiler failed (" +
                   (run.status < 0 ? std::string("killed") : "exit status " + std::to_string(run.status)) +
                   "; lines of kernel.cu are lines of GeneratedKernel::source):\n" + message;
    return result;
  }
  if (result.temp_dir.empty()) {
    // Publish: the library first, then the text that validates it.
    fs::rename(object, library, ec);
    if (!ec) fs::rename(source_file, stored_text, ec);
    if (ec) {
      result.error = "emulator: cannot publish " + library.string() + ": " + ec.message();
      return result;
    }
    result.path = library.string();
  } else {
    result.path = object.string();
  }
  return result;
}

}  // namespace dc::emu
