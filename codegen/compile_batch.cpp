#include "compile_batch.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "ir/error.h"
#include "prelude.h"

namespace dc {

namespace {

std::string batch_suffix(size_t i) { return "_b" + std::to_string(i); }

// The distinct kernel names of a generated kernel's launches.
std::set<std::string> kernel_names(const GeneratedKernel& k) {
  std::set<std::string> names;
  for (const auto& l : k.launches) names.insert(l.kernel);
  return names;
}

// Replaces every `from` in `text` by `to`; the count of replacements.
int replace_all(std::string& text, const std::string& from, const std::string& to) {
  int n = 0;
  for (size_t p = text.find(from); p != std::string::npos; p = text.find(from, p + to.size())) {
    text.replace(p, from.size(), to);
    ++n;
  }
  return n;
}

// The source after its prelude with its kernels renamed, or "" when that is not possible.
std::string batch_member(const GeneratedKernel& k, size_t index) {
  const std::string& prelude = cuda_prelude();
  const size_t at = k.source.find(prelude);
  if (at == std::string::npos) return "";
  std::string rest = k.source.substr(at + prelude.size());
  for (const auto& name : kernel_names(k)) {
    const std::string renamed = name + batch_suffix(index);
    // The definition: `void NAME(` or `void DC_LAUNCH_BOUNDS(n) NAME(`, once.
    if (replace_all(rest, " " + name + "(", " " + renamed + "(") != 1) return "";
    replace_all(rest, "DC_EXPORT_KERNEL(" + name + ")", "DC_EXPORT_KERNEL(" + renamed + ")");
  }
  return "namespace dc_batch_" + std::to_string(index) + " {\n" + rest + "\n}  // namespace\n";
}

std::string program_of(const std::vector<const GeneratedKernel*>& kernels,
                       const std::vector<size_t>& members, std::vector<size_t>* left_out) {
  std::string program = cuda_prelude() + "\n";
  for (size_t i : members) {
    const std::string member = batch_member(*kernels[i], i);
    if (member.empty()) {
      if (left_out) left_out->push_back(i);
      continue;
    }
    program += member;
  }
  return program;
}

class Batcher {
 public:
  Batcher(const std::vector<const GeneratedKernel*>& kernels, const std::string& arch,
          const CompileOptions& options, std::vector<BatchItemResult>& results, BatchStats& stats)
      : kernels_(kernels), arch_(arch), options_(options), results_(results), stats_(stats) {}

  void alone(size_t i) {
    const CompileResult r = compile(kernels_[i]->source);
    BatchItemResult& out = results_[i];
    out.batched = false;
    out.ok = r.ok;
    out.error = r.error;
    out.kernels = r.kernels;
  }

  // Compiles `members` as one program; halves it on a failure.
  void run(const std::vector<size_t>& members) {
    if (members.empty()) return;
    if (members.size() == 1) {
      alone(members[0]);
      return;
    }
    std::vector<size_t> odd;
    const std::string program = program_of(kernels_, members, &odd);
    for (size_t i : odd) alone(i);
    std::vector<size_t> batched;
    for (size_t i : members)
      if (std::find(odd.begin(), odd.end(), i) == odd.end()) batched.push_back(i);
    if (batched.empty()) return;
    const CompileResult r = compile(program);
    if (!r.ok) {
      const size_t half = batched.size() / 2;
      run(std::vector<size_t>(batched.begin(), batched.begin() + static_cast<long>(half)));
      run(std::vector<size_t>(batched.begin() + static_cast<long>(half), batched.end()));
      return;
    }
    std::map<std::string, const KernelResources*> by_name;
    for (const auto& k : r.kernels) by_name[k.kernel] = &k;
    for (size_t i : batched) {
      BatchItemResult& out = results_[i];
      out.ok = true;
      out.kernels.clear();
      for (const auto& name : kernel_names(*kernels_[i])) {
        const auto it = by_name.find(name + batch_suffix(i));
        DC_INTERNAL_CHECK(it != by_name.end(), "ptxas reported no figures for kernel ",
                          name + batch_suffix(i), " of a batch for ", arch_);
        KernelResources k = *it->second;
        k.kernel = name;
        out.kernels.push_back(std::move(k));
      }
    }
  }

 private:
  CompileResult compile(const std::string& source) {
    CompileResult r = compile_cuda(source, arch_, options_);
    ++stats_.programs;
    stats_.seconds += r.compile_seconds;
    return r;
  }

  const std::vector<const GeneratedKernel*>& kernels_;
  const std::string& arch_;
  const CompileOptions& options_;
  std::vector<BatchItemResult>& results_;
  BatchStats& stats_;
};

}  // namespace

std::string batch_program(const std::vector<const GeneratedKernel*>& kernels,
                          std::vector<size_t>* left_out) {
  std::vector<size_t> all(kernels.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return program_of(kernels, all, left_out);
}

std::vector<BatchItemResult> compile_batch(const std::vector<const GeneratedKernel*>& kernels,
                                           const std::string& arch, const CompileOptions& options,
                                           BatchStats* stats) {
  std::vector<BatchItemResult> results(kernels.size());
  BatchStats local;
  BatchStats& counted = stats ? *stats : local;
  std::vector<size_t> all(kernels.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  // The retry is per source, not per program: ptxas's bound would reach every entry.
  CompileOptions first = options;
  first.retry_spills = false;
  Batcher(kernels, arch, first, results, counted).run(all);
  if (!retries_spills(options)) return results;
  std::vector<size_t> spilling;
  for (size_t i : all)
    if (results[i].ok && spilled_bytes(results[i].kernels) > 0) spilling.push_back(i);
  if (spilling.empty()) return results;
  const CompileOptions again_options = spill_retry_options(options);
  std::vector<BatchItemResult> again(kernels.size());
  Batcher(kernels, arch, again_options, again, counted).run(spilling);
  for (size_t i : spilling) {
    if (!again[i].ok || spilled_bytes(again[i].kernels) >= spilled_bytes(results[i].kernels))
      continue;
    again[i].batched = results[i].batched;  // how the first compile went
    again[i].spill_retried = true;
    results[i] = std::move(again[i]);
  }
  return results;
}

}  // namespace dc
