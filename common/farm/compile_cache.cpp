#include "compile_cache.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "farm.pb.h"

namespace dc {
namespace {

namespace fs = std::filesystem;

farm::CompiledEntry to_entry(const std::string& key, const CompileResult& r) {
  farm::CompiledEntry e;
  e.set_key(key);
  e.set_arch(r.arch);
  e.set_nvrtc_version(r.nvrtc_version);
  e.set_ok(r.ok);
  e.set_error(r.ok ? std::string() : (r.error.empty() ? r.log : r.error));
  e.set_cubin(std::string(r.cubin.begin(), r.cubin.end()));
  e.set_compile_seconds(r.compile_seconds);
  for (const KernelResources& k : r.kernels) {
    farm::KernelResourcesEntry* p = e.add_kernels();
    p->set_kernel(k.kernel);
    p->set_registers(k.registers);
    p->set_spill_stores_bytes(k.spill_stores_bytes);
    p->set_spill_loads_bytes(k.spill_loads_bytes);
    p->set_static_smem_bytes(k.static_smem_bytes);
    p->set_const_bytes(k.const_bytes);
    p->set_stack_bytes(k.stack_bytes);
  }
  return e;
}

CompileResult from_entry(const farm::CompiledEntry& e) {
  CompileResult r;
  r.ok = e.ok();
  r.arch = e.arch();
  r.error = e.error();
  r.log = e.error();
  r.cubin.assign(e.cubin().begin(), e.cubin().end());
  r.compile_seconds = e.compile_seconds();
  r.nvrtc_version = e.nvrtc_version();
  for (const farm::KernelResourcesEntry& p : e.kernels()) {
    KernelResources k;
    k.kernel = p.kernel();
    k.registers = p.registers();
    k.spill_stores_bytes = p.spill_stores_bytes();
    k.spill_loads_bytes = p.spill_loads_bytes();
    k.static_smem_bytes = p.static_smem_bytes();
    k.const_bytes = p.const_bytes();
    k.stack_bytes = p.stack_bytes();
    r.kernels.push_back(std::move(k));
  }
  return r;
}

std::optional<CompileResult> load(const fs::path& path, const std::string& key, const std::string& arch) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  farm::CompiledEntry e;
  if (!e.ParseFromString(bytes) || e.key() != key || e.arch() != arch || (e.ok() && e.cubin().empty())) {
    spdlog::warn("compile cache: {} is corrupt; compiling again", path.string());
    return std::nullopt;
  }
  return from_entry(e);
}

void store(const fs::path& dir, const fs::path& path, const farm::CompiledEntry& e) {
  static bool warned = false;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (out) e.SerializeToOstream(&out);
    if (!out) {
      if (!warned) spdlog::warn("compile cache: cannot write {}; compiling without a cache", dir.string());
      warned = true;
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
}

}  // namespace

CachedCompile compile_with_cache(const std::string& source, const std::string& arch,
                                 const std::string& cache_dir) {
  CachedCompile out;
  if (cache_dir.empty()) {
    out.result = compile_cuda(source, arch);
    return out;
  }
  const std::string key = compile_cache_key(source, arch);
  const fs::path dir = fs::path(cache_dir) / "nvrtc";
  const fs::path path = dir / (key + ".bin");
  if (std::optional<CompileResult> hit = load(path, key, arch)) {
    out.result = std::move(*hit);
    out.from_cache = true;
    return out;
  }
  out.result = compile_cuda(source, arch);
  store(dir, path, to_entry(key, out.result));
  return out;
}

}  // namespace dc
