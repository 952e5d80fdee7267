#include "compile_cache.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <thread>
#include <type_traits>

namespace dc {
namespace {

namespace fs = std::filesystem;

// An entry's bytes: a magic line, then length-prefixed fields in a fixed order (little
// endian, as every machine that runs NVRTC is). No protobuf: the runtime (libdcrt) shares
// this cache and must not link the farm's protocol.
constexpr char kMagic[] = "dc-compile-cache 2\n";

class Writer {
 public:
  template <class T>
  void num(T v) {
    static_assert(std::is_arithmetic_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void bytes(const char* p, size_t n) {
    num<uint64_t>(n);
    out_.append(p, n);
  }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_ = kMagic;
};

// Reads what Writer wrote; any read past the end or absurd length fails the whole entry.
class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in), at_(sizeof kMagic - 1) {
    ok_ = in_.compare(0, at_, kMagic) == 0;
  }
  template <class T>
  T num() {
    T v{};
    if (!take(sizeof v)) return v;
    std::memcpy(&v, in_.data() + at_ - sizeof v, sizeof v);
    return v;
  }
  std::string str() {
    const auto n = num<uint64_t>();
    if (!ok_ || n > in_.size() || !take(static_cast<size_t>(n))) return {};
    return in_.substr(at_ - n, n);
  }
  bool done() const { return ok_ && at_ == in_.size(); }

 private:
  bool take(size_t n) {
    if (!ok_ || in_.size() - at_ < n) return ok_ = false;
    at_ += n;
    return true;
  }
  const std::string& in_;
  size_t at_;
  bool ok_;
};

std::string encode(const std::string& key, const CompileResult& r) {
  Writer w;
  w.str(key);
  w.str(r.arch);
  w.str(r.nvrtc_version);
  w.num<uint8_t>(r.ok ? 1 : 0);
  w.str(r.ok ? std::string() : (r.error.empty() ? r.log : r.error));
  w.bytes(r.cubin.data(), r.cubin.size());
  w.num<double>(r.compile_seconds);
  w.num<uint64_t>(r.kernels.size());
  for (const KernelResources& k : r.kernels) {
    w.str(k.kernel);
    w.num<int32_t>(k.registers);
    w.num<int32_t>(k.spill_stores_bytes);
    w.num<int32_t>(k.spill_loads_bytes);
    w.num<int64_t>(k.static_smem_bytes);
    w.num<int64_t>(k.const_bytes);
    w.num<int64_t>(k.stack_bytes);
  }
  return w.take();
}

// The entry, if it is whole and is the one for `key` and `arch`.
std::optional<CompileResult> decode(const std::string& bytes, const std::string& key, const std::string& arch) {
  Reader rd(bytes);
  CompileResult r;
  const std::string stored_key = rd.str();
  r.arch = rd.str();
  r.nvrtc_version = rd.str();
  r.ok = rd.num<uint8_t>() == 1;
  r.error = rd.str();
  r.log = r.error;
  const std::string cubin = rd.str();
  r.cubin.assign(cubin.begin(), cubin.end());
  r.compile_seconds = rd.num<double>();
  const auto kernels = rd.num<uint64_t>();
  for (uint64_t i = 0; i < kernels && i < 4096; ++i) {
    KernelResources k;
    k.kernel = rd.str();
    k.registers = rd.num<int32_t>();
    k.spill_stores_bytes = rd.num<int32_t>();
    k.spill_loads_bytes = rd.num<int32_t>();
    k.static_smem_bytes = rd.num<int64_t>();
    k.const_bytes = rd.num<int64_t>();
    k.stack_bytes = rd.num<int64_t>();
    r.kernels.push_back(std::move(k));
  }
  if (!rd.done() || kernels != r.kernels.size() || stored_key != key || r.arch != arch || (r.ok && r.cubin.empty()))
    return std::nullopt;
  return r;
}

std::optional<CompileResult> load(const fs::path& path, const std::string& key, const std::string& arch) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::optional<CompileResult> r = decode(bytes, key, arch);
  if (!r) spdlog::warn("compile cache: {} is corrupt; compiling again", path.string());
  return r;
}

void store(const fs::path& dir, const fs::path& path, const std::string& bytes) {
  static std::atomic<bool> warned{false};
  std::error_code ec;
  fs::create_directories(dir, ec);
  // Unique per process and thread: the executors of one process, and processes sharing the
  // folder, may store the same key at once; each writes its own file and the renames race
  // harmlessly (same bytes).
  const fs::path tmp = fmt::format("{}.tmp.{}.{}", path.string(), ::getpid(),
                                   std::hash<std::thread::id>{}(std::this_thread::get_id()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (out) out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      if (!warned.exchange(true))
        spdlog::warn("compile cache: cannot write {}; compiling without a cache", dir.string());
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
  store(dir, path, encode(key, out.result));
  return out;
}

}  // namespace dc
