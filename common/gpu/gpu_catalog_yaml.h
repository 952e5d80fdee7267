// Reading a GPU table in gpus.yaml's format, with every check docs/gpus.md lists (ranges,
// unknown or repeated fields, names and device patterns given twice); errors are UserErrors
// naming the origin, the line, the GPU and the field. Its own target, dc_gpu_yaml (the only
// one with yaml-cpp): the build's table generator (gen_gpu_table.cpp) and the tests use it;
// dc_gpu itself, and so the runtime, holds the generated table and needs no YAML.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "gpu/gpu_catalog.h"

namespace dc {

// `origin` names the text in error messages (a path).
std::vector<GpuSpec> read_gpu_specs_yaml(const std::string& text, const std::string& origin);
std::vector<GpuSpec> read_gpu_specs_file(const std::filesystem::path& path);

inline GpuCatalog gpu_catalog_from_yaml(const std::string& text, const std::string& origin) {
  return GpuCatalog::from_specs(read_gpu_specs_yaml(text, origin));
}
inline GpuCatalog gpu_catalog_from_file(const std::filesystem::path& path) {
  return GpuCatalog::from_specs(read_gpu_specs_file(path));
}

}  // namespace dc
