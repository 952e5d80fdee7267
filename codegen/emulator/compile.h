// Compiling emulator sources into shared objects with the host C++ compiler, cached by a hash
// of the full text and the compiler command, so that a kernel compiles once.
#pragma once

#include <string>

#include "emulator.h"

namespace dc::emu {

struct CompiledLibrary {
  std::string path;         // the shared object, "" if compiling failed
  std::string error;        // what failed, with the compiler's message
  std::string temp_dir;     // remove after use ("" unless the cache directory was unusable)
  bool from_cache = false;
};

// Compiles `source` (runtime + kernel) with options.compiler and options.flags plus
// -shared -fPIC -fvisibility=hidden. The cache holds <hash>.cu and <hash>.so; a hit is a
// <hash>.so whose <hash>.cu holds exactly this text and command. Files are published by
// rename, so concurrent processes sharing the cache are safe. An unusable cache directory
// falls back to a fresh temporary one.
CompiledLibrary compile_library(const std::string& source, const EmulatorOptions& options);

}  // namespace dc::emu
