// Shared by the libFuzzer harnesses (tests/fuzz/*.cpp, scripts/fuzz.sh, docs/bench/fuzz.md):
// scratch files for loaders that read paths, and the rule every harness checks: bad input
// is a UserError (ProtocolError is one); anything else that escapes is a finding.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "ir/error.h"
#include "ir/log.h"

namespace dc::fuzz {

// This process's scratch folder (tmpfs when there is one): each fuzzer process (libFuzzer
// -jobs/-workers) gets its own.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* shm = "/dev/shm";
    const std::filesystem::path base = std::filesystem::is_directory(shm)
                                           ? std::filesystem::path(shm)
                                           : std::filesystem::temp_directory_path();
    std::filesystem::path d = base / ("dc-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

// A scratch file holding `bytes`.
inline std::string scratch_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::filesystem::path p = scratch_dir() / name;
  write_file(p, std::string_view(reinterpret_cast<const char*>(data), size));
  return p.string();
}

// Splits `bytes` at every `sep` (files packed into one fuzz input).
inline std::vector<std::string_view> split(std::string_view bytes, std::string_view sep) {
  std::vector<std::string_view> parts;
  for (;;) {
    const size_t at = bytes.find(sep);
    if (at == std::string_view::npos) break;
    parts.push_back(bytes.substr(0, at));
    bytes.remove_prefix(at + sep.size());
  }
  parts.push_back(bytes);
  return parts;
}

// Runs `f` on one input: a UserError is the expected answer to bad input; an InternalError
// or any other exception is a finding, reported and turned into a crash libFuzzer records.
template <class F>
void expect_user_errors(F&& f) {
  try {
    f();
  } catch (const UserError&) {
  } catch (const InternalError& e) {
    std::fprintf(stderr, "fuzz finding: InternalError: %s\n", e.what());
    std::abort();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz finding: uncaught exception (not a UserError): %s\n", e.what());
    std::abort();
  }
}

// Quiet logs: warnings on every bad input (dc's, protobuf's "invalid UTF-8") would swamp
// the fuzzer's output.
inline void quiet_logs() {
  init_logging("off");
  google::protobuf::SetLogHandler(nullptr);
}

}  // namespace dc::fuzz
