#include "op_case_harness.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <thread>

#include "emulator.h"
#include "emulator/compile.h"
#include "generate.h"
#include "gpu/gpu_catalog.h"
#include "nvrtc.h"
#include "param_space.h"
#include "ref/compare.h"
#include "variant_tolerance.h"

namespace dc::testing {

namespace {

// One kernel of a case, with what compiling it gave.
struct Planned {
  size_t part = 0;
  GeneratedKernel k;
  std::vector<char> binary;
  std::string compile_error;
  std::string nvrtc_error;
};

// Up to `max` of `vs`, spread over their order.
std::vector<Variant> spread(const std::vector<Variant>& vs, size_t max) {
  std::vector<Variant> out;
  for (size_t i = 0; i < max && i < vs.size(); ++i) out.push_back(vs[i * vs.size() / std::min(max, vs.size())]);
  return out;
}

// The pick's variants in `spec`'s space; `most` > 0 caps its count (of each template, for a
// per-template pick).
std::vector<Variant> picked(const Workload& w, const VariantPick& p, const GpuSpec& spec, size_t most) {
  const size_t max = most > 0 ? std::min(p.max, most) : p.max;
  std::vector<Variant> all;
  for (auto& v : enumerate_variants(w, spec, SpaceOptions{{"fp32"}}))
    if (!p.accept || p.accept(v)) all.push_back(std::move(v));
  if (all.empty()) return {};
  if (p.middle) return {all[all.size() / 2]};
  if (!p.per_template) return spread(all, max);
  std::map<std::string, std::vector<Variant>> by_template;
  for (const auto& v : all) by_template[v.template_name].push_back(v);
  std::vector<Variant> out;
  for (const auto& [name, vs] : by_template)
    for (auto& v : spread(vs, max)) out.push_back(std::move(v));
  return out;
}

std::string part_label(const OpCase& c, DType storage, const CasePart& p) {
  std::string s = c.name + " [" + std::string(dtype_name(storage)) + "]";
  return p.label.empty() ? s : s + " " + p.label;
}

std::string kernel_label(const GeneratedKernel& k) {
  return k.variant_key.empty() ? k.template_name : k.variant_key;  // the key names the template
}

// The kernels of every part: the reference kernel, the picked variants (each key once per
// part), the hand-built ones; what a part or a pick promised and lacks goes to `run`.
std::vector<Planned> plan(const OpCase& c, DType storage, const std::vector<CasePart>& parts,
                          const CaseDevice& d, bool first_of_each_pick, CaseRun* run) {
  std::vector<Planned> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    const CasePart& p = parts[i];
    const std::string where = part_label(c, storage, p);
    if (p.reduction_length > 0) {
      const int64_t k = reduction_length(p.w, analyze_workload(p.w));
      if (k != p.reduction_length)
        run->failures.push_back(where + ": the error model's reduction length is " + std::to_string(k) +
                                ", the case says " + std::to_string(p.reduction_length));
    }
    // A generator that throws is a failure of the case, named, not the end of the test.
    auto generate = [&](const std::string& what, const std::function<GeneratedKernel()>& gen) -> std::optional<GeneratedKernel> {
      try {
        return gen();
      } catch (const std::exception& e) {
        run->failures.push_back(where + ": generating " + what + ": " + e.what());
        return std::nullopt;
      }
    };
    if (p.reference_kernel)
      if (auto k = generate("the reference kernel", [&] { return generate_reference(p.w); })) {
        if (k->template_name != "reference")
          run->failures.push_back(where + ": generate_reference made a '" + k->template_name + "' kernel");
        out.push_back({i, std::move(*k), {}, {}, {}});
      }
    std::set<std::string> keys;
    for (const VariantPick& pick : p.picks) {
      const std::vector<Variant> vs = picked(p.w, pick, d.spec, first_of_each_pick ? 1 : d.max_per_pick);
      if (vs.empty() && d.strict && pick.required) run->failures.push_back(where + ": no variant on " + d.spec.name + " satisfies a pick");
      for (const Variant& v : vs) {
        std::optional<GeneratedKernel> generated = generate(v.key(), [&] { return generate_kernel(p.w, v); });
        if (!generated) continue;
        GeneratedKernel k = std::move(*generated);
        if (pick.source_check)
          if (const std::string why = pick.source_check(v, k); !why.empty())
            run->failures.push_back(where + ": " + kernel_label(k) + " source: " + why);
        if (keys.insert(v.key()).second) out.push_back({i, std::move(k), {}, {}, {}});
      }
    }
    for (const GeneratedKernel& k : p.kernels) out.push_back({i, k, {}, {}, {}});
  }
  return out;
}

// The device's compiler (and NVRTC, where asked) over every kernel, on worker threads: most
// of a case's time is compiling.
void compile_all(std::vector<Planned>& ks, const CaseDevice& d) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < std::max(2u, std::thread::hardware_concurrency()); ++t)
    workers.emplace_back([&] {
      for (size_t i; (i = next++) < ks.size();) {
        ks[i].binary = d.compile(ks[i].k, &ks[i].compile_error);
        if (d.nvrtc_arch.empty()) continue;
        const CompileResult r = compile_cuda(ks[i].k.source, d.nvrtc_arch);
        if (!r.ok) ks[i].nvrtc_error = r.error;
      }
    });
  for (auto& t : workers) t.join();
}

std::vector<Tensor> inputs_in_graph_order(const CasePart& p) {
  std::vector<Tensor> in;
  for (const auto& name : p.w.graph.inputs) in.push_back(p.inputs.at(name));
  return in;
}

// Runs one kernel and compares every workload output; "" or what went wrong.
std::string run_and_compare(const CasePart& p, const Planned& k, const ref::TensorMap& want, const CaseDevice& d) {
  if (!k.nvrtc_error.empty()) return "NVRTC " + d.nvrtc_arch + ": " + k.nvrtc_error;
  if (!k.compile_error.empty()) return "compile: " + k.compile_error.substr(0, 2000);
  const Tolerance tol = variant_tolerance("fp32", p.w);
  return run_and_compare_outputs(d.run, p.w, k.k, k.binary, inputs_in_graph_order(p), want, p.exact, tol);
}

}  // namespace

std::string run_and_compare_outputs(const KernelRun& run, const Workload& w, const GeneratedKernel& k,
                                    const std::vector<char>& binary, const std::vector<Tensor>& inputs,
                                    const ref::TensorMap& want, bool exact, const Tolerance& tol) {
  std::vector<Tensor> bufs;
  if (std::string why = bind_inputs(w, k, inputs, &bufs); !why.empty()) return why;
  const GpuRunResult r = run(k, binary, bufs);
  if (!r.ok()) return std::string(job_status_name(r.status)) + ": " + r.error.substr(0, 2000);
  std::string errors;
  for (const auto& name : w.graph.outputs) {
    const Tensor* got = nullptr;
    for (size_t i = 0; i < k.buffers.size(); ++i)
      if (k.buffers[i].role == BufferRole::output && k.buffers[i].name == name) got = &bufs[i];
    const std::string why = got ? compare_output(*got, want.at(name), exact, tol) : "not written by the kernel";
    if (!why.empty()) errors += (errors.empty() ? "output " : "; output ") + name + ": " + why;
  }
  return errors;
}

std::string compare_output(const Tensor& got, const Tensor& want, bool exact, const Tolerance& tol) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return "dtype/shape " + std::string(dtype_name(got.dtype())) + shape_str(got.shape()) + " vs " +
           std::string(dtype_name(want.dtype())) + shape_str(want.shape());
  const std::vector<float> a = got.to_float_vector(), b = want.to_float_vector();
  // The worst element: a NaN where the reference has none (or none where it has one) first,
  // then the largest difference; for a bitwise check any other bits (-0 vs 0) count.
  size_t worst = 0;
  double worst_err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double e = 0;
    if (std::isnan(a[i]) != std::isnan(b[i])) e = std::numeric_limits<double>::infinity();
    else if (!std::isnan(a[i]) && std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      e = a[i] == b[i] ? std::numeric_limits<double>::min() : std::fabs(static_cast<double>(a[i]) - b[i]);
    if (std::isnan(e)) e = std::numeric_limits<double>::infinity();  // inf - inf
    if (e > worst_err) worst_err = e, worst = i;
  }
  std::ostringstream os;
  if (exact) {
    if (worst_err == 0) return "";
    os << "not bitwise equal";
  } else {
    const ref::Comparison c = ref::compare_tensors(got, want, tol.rtol, tol.atol);
    if (c.pass) return "";
    os << "rel L2 " << c.rel_l2_error << " over the bound (rtol " << tol.rtol << ", atol " << tol.atol
       << "), max abs " << c.max_abs_error << (c.problem.empty() ? "" : " " + c.problem);
  }
  os << "; worst element " << worst << " of " << a.size() << ": " << a[worst] << " vs reference " << b[worst];
  return os.str();
}

CaseRun run_op_case(const OpCase& c, DType storage, const CaseDevice& d) {
  CaseRun run;
  const std::vector<CasePart> parts = c.build(storage);
  if (parts.empty()) run.failures.push_back(c.name + ": the case built no workload");
  std::vector<Planned> ks = plan(c, storage, parts, d, false, &run);
  compile_all(ks, d);
  std::vector<ref::TensorMap> want(parts.size());
  std::vector<std::map<std::string, int>> part_templates(parts.size());
  for (const Planned& k : ks) {
    const CasePart& p = parts[k.part];
    if (want[k.part].empty()) want[k.part] = ref::run_graph(p.w.graph, p.inputs);
    const std::string why = run_and_compare(p, k, want[k.part], d);
    if (!why.empty()) {
      run.failures.push_back(part_label(c, storage, p) + ": " + kernel_label(k.k) + " on the " + d.name + ": " + why +
                             "\n  workload " + p.w.canonical);
      continue;
    }
    ++run.kernels;
    ++run.templates[k.k.template_name];
    ++part_templates[k.part][k.k.template_name];
  }
  if (!d.strict) return run;
  for (size_t i = 0; i < parts.size(); ++i)
    for (const auto& t : parts[i].templates)
      if (!part_templates[i].count(t))
        run.failures.push_back(part_label(c, storage, parts[i]) + ": no " + t + " kernel ran");
  for (const auto& t : c.templates)
    if (!run.templates.count(t)) run.failures.push_back(c.name + " [" + std::string(dtype_name(storage)) + "]: no " + t + " kernel ran");
  return run;
}

std::vector<CaseTiming> time_op_case(const OpCase& c, DType storage, const CaseDevice& d) {
  CaseRun unused;
  const std::vector<CasePart> parts = c.build(storage);
  std::vector<Planned> ks = plan(c, storage, parts, d, true, &unused);
  compile_all(ks, d);
  std::vector<CaseTiming> out;
  for (const Planned& k : ks) {
    const CasePart& p = parts[k.part];
    CaseTiming t;
    t.kernel = (p.label.empty() ? "" : p.label + ": ") + kernel_label(k.k);
    std::vector<Tensor> bufs;
    t.error = k.compile_error.empty() ? bind_inputs(p.w, k.k, inputs_in_graph_order(p), &bufs) : k.compile_error;
    if (t.error.empty()) {
      const TimingResult r = d.time(k.k, k.binary, bufs);
      if (!r.ok() || r.samples_us.empty()) {
        t.error = std::string(job_status_name(r.status)) + ": " + r.error;
      } else {
        std::vector<double> s = r.samples_us;
        std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(s.size() / 2), s.end());
        t.median_us = s[s.size() / 2];
        t.gflops = static_cast<double>(p.w.flops) / (t.median_us * 1e3);
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

CaseDevice emulator_device() {
  CaseDevice d;
  d.name = "host emulator";
  d.spec = GpuCatalog::builtin().require("a100");
  d.compile = [](const GeneratedKernel& k, std::string* error) {
    const emu::CompiledLibrary lib = emu::compile_library(emulator_source(k), EmulatorOptions{});  // warms the cache
    if (lib.path.empty()) *error = lib.error;
    return std::vector<char>{};
  };
  d.run = [](const GeneratedKernel& k, const std::vector<char>&, std::vector<Tensor>& buffers) {
    const EmulatorResult r = emulate(k, buffers);  // outputs start poisoned (NaN)
    GpuRunResult out;
    if (!r.ok) {
      out.status = JobStatus::runtime_fault;
      out.error = r.error;
    }
    return out;
  };
  d.strict = true;
  d.nvrtc_arch = "sm_80";
  return d;
}

}  // namespace dc::testing
