// The ptxas figures of every (architecture, source) unit a compile-everything run has compiled,
// kept in a file so that a run that was stopped (the whole matrix is hours on two cores) starts
// again where it stopped, and so that a run after a generator or estimator change compiles
// only the sources that changed. One line per unit, appended as each batch finishes:
//   KEY \t ok \t REGS:SPILL_STORES:SPILL_LOADS[,...] \t first error line
// KEY is compile_cache_key(source, arch): it covers the source, the architecture, NVRTC's
// options and NVRTC's version, so a figure is never reused for a compile that would differ.
// A line cut short by a kill is ignored on reading.
#pragma once

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>

#include "compile_batch.h"

namespace dc {

class FiguresStore {
 public:
  // `path` empty: a store that finds nothing and keeps nothing.
  explicit FiguresStore(std::string path) : path_(std::move(path)) {
    if (path_.empty()) return;
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);)
      if (auto parsed = parse(line)) figures_[parsed->first] = std::move(parsed->second);
    out_.open(path_, std::ios::app);
  }

  bool enabled() const { return !path_.empty(); }
  size_t size() const { return figures_.size(); }

  std::optional<BatchItemResult> find(const std::string& key) const {
    const auto it = figures_.find(key);
    if (it == figures_.end()) return std::nullopt;
    return it->second;
  }

  // Not thread-safe: callers append under their own lock. Flushed per call, so a kill loses
  // at most the batch being written.
  void append(const std::string& key, const BatchItemResult& r) {
    if (!out_.is_open()) return;
    std::string error = r.error.substr(0, r.error.find('\n'));
    for (char& c : error)
      if (c == '\t') c = ' ';
    out_ << key << '\t' << (r.ok ? 1 : 0) << '\t';
    for (size_t i = 0; i < r.kernels.size(); ++i)
      out_ << (i ? "," : "") << r.kernels[i].registers << ':' << r.kernels[i].spill_stores_bytes
           << ':' << r.kernels[i].spill_loads_bytes;
    out_ << '\t' << error << '\n' << std::flush;
    figures_[key] = r;
  }

 private:
  static std::optional<std::pair<std::string, BatchItemResult>> parse(const std::string& line) {
    std::istringstream in(line);
    std::string key, ok, kernels, error;
    if (!std::getline(in, key, '\t') || !std::getline(in, ok, '\t') ||
        !std::getline(in, kernels, '\t') || in.eof())  // no tab after the figures: cut short
      return std::nullopt;
    if (!std::getline(in, error)) error.clear();
    if (key.size() != 16 || (ok != "0" && ok != "1")) return std::nullopt;
    BatchItemResult r;
    r.ok = ok == "1";
    r.error = error;
    std::istringstream ks(kernels);
    for (std::string k; std::getline(ks, k, ',');) {
      KernelResources kr;
      char c1 = 0, c2 = 0;
      std::istringstream f(k);
      if (!(f >> kr.registers >> c1 >> kr.spill_stores_bytes >> c2 >> kr.spill_loads_bytes) ||
          c1 != ':' || c2 != ':')
        return std::nullopt;
      r.kernels.push_back(kr);
    }
    if (r.ok && r.kernels.empty()) return std::nullopt;
    return std::make_pair(key, std::move(r));
  }

  std::string path_;
  std::unordered_map<std::string, BatchItemResult> figures_;
  std::ofstream out_;
};

}  // namespace dc
