// The worker's on-disk compile cache: NVRTC results (CUBIN, ptxas figures, or the error of a
// source that does not compile) kept under DIR/nvrtc/<compile_cache_key>.bin, so that a
// variant measured again, on another device of the same arch or after a restart, compiles
// once. The key (common/cuda/nvrtc.h) covers the source, the arch, the NVRTC options and the
// NVRTC version. Entries are published by rename, so processes sharing DIR are safe; an
// unreadable or corrupt entry is recompiled and rewritten, never trusted.
#pragma once

#include <string>

#include "nvrtc.h"

namespace dc {

struct CachedCompile {
  CompileResult result;
  bool from_cache = false;
};

// compile_cuda(source, arch) through the cache in `cache_dir` ("" compiles without one).
// A cache directory that cannot be written only costs the caching (logged once).
CachedCompile compile_with_cache(const std::string& source, const std::string& arch,
                                 const std::string& cache_dir);

}  // namespace dc
