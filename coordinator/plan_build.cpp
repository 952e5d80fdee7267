#include "plan_build.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "generate.h"
#include "ir/error.h"
#include "ir/optimizer_update.h"
#include "nvrtc.h"
#include "passes/training_state.h"
#include "plan/memory_plan.h"
#include "plan/state_alias.h"
#include "plan/plan_io.h"
#include "plan_views.h"

namespace dc {

namespace {

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// The chosen clusters in an order that respects their data dependencies: a cluster runs
// after every cluster producing one of its inputs, and an optimizer update's cluster after
// every other cluster reading one of its tensors' inputs (the plan writes a weight and its state in
// place: docs/training.md "State between steps"; a data gradient fused with a later node
// would otherwise read a weight its update had written). Ordering by first node is not
// enough (a cluster {1, 5} may need a cluster {2}); Kahn's algorithm, earliest first node
// first.
std::vector<size_t> cluster_order(const Graph& g, const std::vector<Candidate>& candidates,
                                  const std::vector<StepChoice>& choices) {
  std::vector<int> cluster_of(g.nodes.size(), -1);
  for (size_t c = 0; c < choices.size(); ++c)
    for (size_t n : candidates.at(choices[c].candidate).nodes) {
      DC_INTERNAL_CHECK(n < g.nodes.size() && cluster_of[n] < 0, "assemble_plan: node ", n,
                        " is in two chosen clusters or out of range");
      cluster_of[n] = static_cast<int>(c);
    }
  for (size_t n = 0; n < g.nodes.size(); ++n)
    DC_INTERNAL_CHECK(cluster_of[n] >= 0, "assemble_plan: node ", g.nodes[n].name, " is in no chosen cluster");

  std::vector<std::set<size_t>> succ(choices.size());
  std::vector<int> pending(choices.size(), 0);
  const auto before = [&](size_t first_node, size_t then_node) {
    const size_t from = static_cast<size_t>(cluster_of[first_node]), to = static_cast<size_t>(cluster_of[then_node]);
    if (from != to && succ[from].insert(to).second) ++pending[to];
  };
  std::map<std::string, std::vector<size_t>> readers;
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (const auto& in : g.nodes[n].inputs) {
      if (in.empty()) continue;
      readers[in].push_back(n);
      if (const auto p = g.producer(in)) before(*p, n);
    }
  // The tensors' own inputs (W, G, the moments), not those every bucket shares (the step,
  // fp16's scale and flag), which no update writes.
  for (size_t u = 0; u < g.nodes.size(); ++u) {
    if (!is_optimizer_update(g.nodes[u].op)) continue;
    const OptimizerUpdateLayout l = optimizer_update_layout(g.nodes[u]);
    for (size_t i = 0; i < l.tensors * l.inputs_per_tensor; ++i)
      for (size_t n : readers[g.nodes[u].inputs[i]]) before(n, u);
  }
  auto first_node = [&](size_t c) { return candidates[choices[c].candidate].nodes.front(); };
  auto later = [&](size_t a, size_t b) { return first_node(a) > first_node(b); };
  std::priority_queue<size_t, std::vector<size_t>, decltype(later)> ready(later);
  for (size_t c = 0; c < choices.size(); ++c)
    if (pending[c] == 0) ready.push(c);
  std::vector<size_t> order;
  while (!ready.empty()) {
    const size_t c = ready.top();
    ready.pop();
    order.push_back(c);
    for (size_t s : succ[c])
      if (--pending[s] == 0) ready.push(s);
  }
  DC_INTERNAL_CHECK(order.size() == choices.size(), "assemble_plan: the chosen clusters depend on each other in a cycle");
  return order;
}

// Builds tensors, steps and modules; one pass over the clusters in execution order.
class Assembler {
 public:
  Assembler(const Graph& g, ExecPlan& p) : g_(g), consumers_(g.consumers()), p_(p), training_(is_training_graph(g)) {
    for (const auto& name : g.inputs) {
      DC_USER_CHECK(std::find(g.outputs.begin(), g.outputs.end(), name) == g.outputs.end(),
                    "model input '", name, "' is also a model output: dc plans need every output computed by a kernel");
      p_.inputs.push_back(tensor(name, PlanTensorKind::input));
    }
    for (const auto& name : g.outputs) {
      DC_USER_CHECK(!g.is_constant(name), "model output '", name,
                    "' is a constant: dc plans need every output computed by a kernel");
      p_.outputs.push_back(tensor(name, PlanTensorKind::output));
    }
  }

  // False when the cluster is not a view (add_step then runs it as a kernel).
  bool add_view(const Candidate& cand, const StepChoice& choice) {
    if (cand.nodes.size() != 1) return false;
    const Node& n = g_.nodes[cand.nodes.front()];
    const auto offsets = view_byte_offsets(g_, n, kPlanAlignment);
    if (!offsets) return false;
    const int x = tensor(n.inputs[0], PlanTensorKind::intermediate);
    const PlanTensorKind in_kind = p_.tensors[static_cast<size_t>(x)].kind;
    // Inference: constant folding's business. Training shields weights from folding, and a
    // view of one (BatchNorm's scale as [C, 1, 1] for a recomputed chain) reads the current step's value.
    if (in_kind == PlanTensorKind::weight && !training_) return false;
    const bool to_output = std::any_of(n.outputs.begin(), n.outputs.end(), [&](const std::string& o) {
      return std::find(g_.outputs.begin(), g_.outputs.end(), o) != g_.outputs.end();
    });
    if (to_output) {
      // The output is the user's buffer: the producer writes there instead, through a view
      // of it. Only a whole view of an intermediate, not itself a model output, can do that.
      if (n.outputs.size() != 1 || (*offsets)[0] != 0 || in_kind != PlanTensorKind::intermediate ||
          reversed_.count(x))
        return false;
      const int y = tensor(n.outputs[0], PlanTensorKind::output);
      PlanTensor& in = p_.tensors[static_cast<size_t>(x)];
      if (in.bytes() != p_.tensors[static_cast<size_t>(y)].bytes()) return false;
      in.kind = PlanTensorKind::view;
      in.view_of = y;
      in.offset = 0;
      reversed_.insert(x);
    } else {
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        const int y = tensor(n.outputs[k], PlanTensorKind::intermediate);
        PlanTensor& out = p_.tensors[static_cast<size_t>(y)];
        out.kind = PlanTensorKind::view;
        out.view_of = x;
        out.offset = (*offsets)[k];
      }
    }
    PlanView v;
    v.cluster = fmt::format("{}#{}", cand.pattern, choice.candidate);
    v.nodes.push_back(n.name);
    p_.views.push_back(std::move(v));
    return true;
  }

  void add_step(const Candidate& cand, const StepChoice& choice) {
    const Workload w = make_workload(g_, cand.nodes, cand.kind, &consumers_);
    const std::string key = choice.variant ? choice.variant->key() : "reference";
    const int step_index = static_cast<int>(p_.steps.size());
    PlanStep step;
    step.module = module_for(w, choice, key);
    step.cluster = fmt::format("{}#{}", cand.pattern, choice.candidate);
    for (size_t n : cand.nodes) step.nodes.push_back(g_.nodes[n].name);
    step.workload = w.signature;
    step.variant_key = key;
    step.reference = !choice.variant.has_value();
    step.measured_us = choice.measured_us;
    step.estimated_us = choice.estimated_us;

    std::map<std::string, std::string> model_name;  // workload tensor -> model tensor
    for (size_t i = 0; i < w.graph.inputs.size(); ++i) model_name[w.graph.inputs[i]] = w.source_inputs[i];
    for (size_t i = 0; i < w.graph.outputs.size(); ++i) model_name[w.graph.outputs[i]] = w.source_outputs[i];
    const GeneratedKernel& k = p_.modules[static_cast<size_t>(step.module)];
    int scratch = 0;
    for (const KernelBuffer& b : k.buffers) {
      int id = 0;
      if (b.role == BufferRole::scratch) {
        id = tensor(fmt::format("{}.scratch{}", step_index, scratch++), PlanTensorKind::scratch, &b);
      } else {
        const auto it = model_name.find(b.name);
        DC_INTERNAL_CHECK(it != model_name.end(), "assemble_plan: kernel buffer ", b.name, " of ", key,
                          " is not a workload input or output");
        id = tensor(it->second, PlanTensorKind::intermediate);
      }
      use(id, step_index);
      step.buffers.push_back(id);
    }
    p_.steps.push_back(std::move(step));
  }

  void finish() {
    resolve_views();
    std::vector<MemoryRequest> requests;
    std::vector<int> ids;
    for (size_t i = 0; i < p_.tensors.size(); ++i) {
      PlanTensor& t = p_.tensors[i];
      if (t.kind != PlanTensorKind::intermediate && t.kind != PlanTensorKind::scratch) {
        t.first_step = t.last_step = -1;
        continue;
      }
      DC_INTERNAL_CHECK(t.first_step >= 0, "assemble_plan: tensor ", t.name, " is never used");
      requests.push_back({std::max<int64_t>(t.bytes(), 1), t.first_step, t.last_step});
      ids.push_back(static_cast<int>(i));
      p_.unshared_bytes += align_up(std::max<int64_t>(t.bytes(), 1), kPlanAlignment);
    }
    const MemoryLayout layout = plan_memory(requests, kPlanAlignment);
    for (size_t i = 0; i < ids.size(); ++i) p_.tensors[static_cast<size_t>(ids[i])].offset = layout.offsets[i];
    p_.arena_bytes = layout.total_bytes;

    int64_t weights_end = 0;
    for (size_t i = 0; i < p_.tensors.size(); ++i) {
      if (p_.tensors[i].kind != PlanTensorKind::weight) continue;
      p_.tensors[i].offset = weights_end;
      weights_end = align_up(weights_end + p_.tensors[i].bytes(), kPlanAlignment);
    }
  }

 private:
  // The id of the model tensor `name`, created on first use. Kind: input/output as set by the
  // constructor, weight for initializers, else `kind`.
  int tensor(const std::string& name, PlanTensorKind kind, const KernelBuffer* scratch = nullptr) {
    if (!scratch) {
      if (const auto it = ids_.find(name); it != ids_.end()) return it->second;
    }
    PlanTensor t;
    t.name = name;
    Tensor value;
    if (scratch) {
      t.kind = PlanTensorKind::scratch;
      t.dtype = scratch->dtype;
      t.shape = scratch->shape;
    } else {
      const TensorInfo& info = g_.info(name);
      t.dtype = info.dtype;
      t.shape = info.shape;
      t.kind = g_.is_constant(name) ? PlanTensorKind::weight : kind;
      if (t.kind == PlanTensorKind::weight) value = g_.initializers.at(name);
    }
    const int id = static_cast<int>(p_.tensors.size());
    p_.tensors.push_back(std::move(t));
    p_.values.push_back(std::move(value));
    if (!scratch) ids_[name] = id;
    return id;
  }

  // Views point at the tensor whose bytes they are, never at another view; that tensor stays
  // live over every step that uses one of its views.
  void resolve_views() {
    auto& ts = p_.tensors;
    for (auto& t : ts) {
      if (t.kind != PlanTensorKind::view) continue;
      while (ts[static_cast<size_t>(t.view_of)].kind == PlanTensorKind::view) {
        const PlanTensor& via = ts[static_cast<size_t>(t.view_of)];
        t.offset += via.offset;
        t.view_of = via.view_of;
      }
    }
    for (auto& t : ts) {
      if (t.kind != PlanTensorKind::view) continue;
      PlanTensor& base = ts[static_cast<size_t>(t.view_of)];
      if (t.first_step >= 0 && (base.kind == PlanTensorKind::intermediate)) {
        base.first_step = base.first_step < 0 ? t.first_step : std::min(base.first_step, t.first_step);
        base.last_step = std::max(base.last_step, t.last_step);
      }
      t.first_step = t.last_step = -1;
    }
  }

  void use(int id, int step) {
    PlanTensor& t = p_.tensors[static_cast<size_t>(id)];
    if (t.first_step < 0) t.first_step = step;
    t.last_step = std::max(t.last_step, step);
  }

  int module_for(const Workload& w, const StepChoice& choice, const std::string& key) {
    const auto k = std::make_pair(w.signature, key);
    if (const auto it = modules_.find(k); it != modules_.end()) return it->second;
    const int id = static_cast<int>(p_.modules.size());
    p_.modules.push_back(choice.variant ? generate_kernel(w, *choice.variant) : generate_reference(w));
    modules_[k] = id;
    return id;
  }

  const Graph& g_;
  const std::map<std::string, std::vector<size_t>> consumers_;  // once, not per step
  ExecPlan& p_;
  std::map<std::string, int> ids_;
  std::map<std::pair<std::string, std::string>, int> modules_;
  std::set<int> reversed_;  // intermediates that became views of a model output
  const bool training_;
};

// The training plan's state pairs (passes/training_state.h): each STATE a weight of the plan,
// its STATE@next an output after the loss and the model's outputs.
void attach_training(const Graph& g, PlanTraining training, ExecPlan& p) {
  DC_INTERNAL_CHECK(is_training_graph(g), "assemble_plan: a training description for an inference graph");
  std::map<std::string, int> id_of;
  for (size_t i = 0; i < p.tensors.size(); ++i) id_of[p.tensors[i].name] = static_cast<int>(i);
  std::set<int> nexts;
  for (const StateUpdate& u : training_state_updates(g)) {
    const auto s = id_of.find(u.state), n = id_of.find(u.next);
    DC_INTERNAL_CHECK(s != id_of.end() && n != id_of.end(), "assemble_plan: state ", u.state, " or ", u.next,
                      " is not a tensor of the plan");
    training.state.push_back({s->second, n->second});
    nexts.insert(n->second);
  }
  training.model_outputs = static_cast<int>(p.outputs.size() - nexts.size());
  p.training = std::move(training);
  // Each optimizer update writes into its state (plan/state_alias.h): held once, not copied.
  alias_state_updates(p);
}

}  // namespace

ExecPlan assemble_plan(const Graph& g, const std::vector<Candidate>& candidates,
                       const std::vector<StepChoice>& choices, const PlanOrigin& origin) {
  DC_INTERNAL_CHECK(origin.gpu, "assemble_plan: no GPU type");
  ExecPlan p;
  p.model_name = origin.model_name.empty() ? g.name : origin.model_name;
  p.model_sha256 = origin.model_sha256;
  p.gpu_type = origin.gpu->name;
  p.gpu_name = origin.gpu->full_name;
  p.gpu_arch = origin.gpu->sm_arch();
  p.nvrtc_version = origin.nvrtc_version.empty() ? nvrtc_version_for(p.gpu_arch) : origin.nvrtc_version;
  p.emulated = origin.emulated;
  p.precision = origin.precision;
  p.weight_transforms = origin.weight_transforms;

  Assembler a(g, p);
  for (size_t c : cluster_order(g, candidates, choices)) {
    if (a.add_view(candidates.at(choices[c].candidate), choices[c])) continue;
    a.add_step(candidates.at(choices[c].candidate), choices[c]);
    p.measured_total_us += choices[c].measured_us;
    p.estimated_total_us += choices[c].estimated_us;
    p.reference_steps += choices[c].variant ? 0 : 1;
  }
  a.finish();
  if (origin.training) attach_training(g, *origin.training, p);
  validate_plan(p, "assembled plan");
  return p;
}

ExecPlan build_tuned_plan(const TuneResult& r, const GpuTuneResult& g) {
  DC_USER_CHECK(g.gpu && !g.choices.empty(), "no selection for GPU type ", g.gpu ? g.gpu->name : "?",
                ": it has no measured results");
  size_t gi = 0;
  while (gi < r.gpus.size() && &r.gpus[gi] != &g) ++gi;
  DC_INTERNAL_CHECK(gi < r.gpus.size() && gi < r.plan.gpus.size(), "build_tuned_plan: GPU result not in the tune");
  const auto& workloads = r.plan.workload_set.workloads;
  std::vector<StepChoice> choices;
  for (const ClusterChoice& c : g.choices) {
    StepChoice pc;
    pc.candidate = c.candidate;
    pc.measured_us = c.measured_us;
    pc.estimated_us = c.estimated_us;
    if (!c.reference) {
      for (const auto& sv : r.plan.gpus[gi].workloads[c.workload].kept)
        if (sv.variant.key() == c.variant_key) pc.variant = sv.variant;
      std::string why;
      if (!pc.variant)  // measured by an earlier run with another space: parse its key
        pc.variant = Variant::from_key(c.variant_key, workloads[c.workload], *g.gpu, &why);
      if (!pc.variant) {
        spdlog::warn("{}: variant {} cannot be generated by this build ({}): the reference kernel runs instead",
                     r.plan.candidates[c.candidate].pattern, c.variant_key, why);
        pc.measured_us = 0;
      } else if (const std::string hash = fnv1a_hex(generate_kernel(workloads[c.workload], *pc.variant).source);
                 hash != c.source_hash) {
        // Every kernel the plan emits must be the source that was measured and checked.
        spdlog::warn("{}: variant {} was measured from source {} but this build writes {}: the reference "
                     "kernel runs instead (tune again to measure the new source)",
                     r.plan.candidates[c.candidate].pattern, c.variant_key, c.source_hash, hash);
        pc.variant.reset();
        pc.measured_us = 0;
      }
    }
    choices.push_back(std::move(pc));
  }
  PlanOrigin origin;
  origin.model_name = r.model_name;
  origin.model_sha256 = r.model_sha256;
  origin.gpu = g.gpu;
  origin.emulated = g.source == TimingSource::emulated;
  origin.weight_transforms = r.weight_transforms;
  origin.precision = r.precision;
  origin.training = r.training;
  return assemble_plan(r.graph, r.plan.candidates, choices, origin);
}

ExecPlan build_estimated_plan(const Graph& simplified, const GpuSpec& gpu, const PlanOptions& opts,
                              bool reference_only) {
  if (!reference_only) return build_estimated_plan(simplified, plan_by_estimate(simplified, {&gpu}, opts), 0, opts);
  std::vector<StepChoice> choices;
  for (size_t n = 0; n < simplified.nodes.size(); ++n) choices.push_back({n, std::nullopt, 0, 0});
  PlanOrigin origin;
  origin.gpu = &gpu;
  origin.precision = opts.precision;
  return assemble_plan(simplified, generate_candidates(simplified), choices, origin);  // singletons first
}

ExecPlan build_estimated_plan(const Graph& simplified, const ModelPlan& mp, size_t gpu_index,
                              const PlanOptions& opts, const PlanTraining* training) {
  const GpuPlan& gp = mp.gpus.at(gpu_index);
  std::vector<StepChoice> choices;
  for (size_t c : gp.cover.chosen) {
    const WorkloadEstimate& we = gp.workloads[mp.workload_set.candidate_workload[c]];
    StepChoice pc{c, std::nullopt, 0, 0};
    if (!we.kept.empty()) {
      pc.variant = we.kept.front().variant;
      pc.estimated_us = we.kept.front().estimate.seconds * 1e6;
    }
    choices.push_back(std::move(pc));
  }
  PlanOrigin origin;
  origin.gpu = gp.gpu;
  origin.precision = opts.precision;
  if (training) origin.training = *training;
  return assemble_plan(simplified, mp.candidates, choices, origin);
}

std::vector<std::string> describe_weight_transforms(const Graph& imported, const Graph& simplified) {
  const auto before = imported.op_counts();
  const auto after = simplified.op_counts();
  auto count = [](const std::map<std::string, int64_t>& m, const std::string& op) {
    const auto it = m.find(op);
    return it == m.end() ? int64_t{0} : it->second;
  };
  std::vector<std::string> out;
  if (const int64_t n = count(before, "BatchNormalization") - count(after, "BatchNormalization"); n > 0)
    out.push_back(fmt::format("BatchNormalization x{} folded into the preceding Conv/Gemm weights and bias", n));
  if (const int64_t n = count(after, "LayerNormalization") - count(before, "LayerNormalization"); n > 0)
    out.push_back(fmt::format("LayerNormalization x{} recognised from ReduceMean/Sub/Pow/Sqrt/Div chains", n));
  if (const int64_t n = count(after, "RMSNormalization") - count(before, "RMSNormalization"); n > 0)
    out.push_back(fmt::format("RMSNormalization x{} recognised from Pow/ReduceMean/Add/Sqrt/Reciprocal chains", n));
  if (const int64_t n = count(before, "MatMul") - count(after, "MatMul"); n > 0)
    out.push_back(fmt::format("MatMul x{} merged into sibling projections over concatenated weights "
                              "(Q/K/V, gate/up; outputs sliced as views)", n));
  if (const int64_t n = count(after, "Gelu") - count(before, "Gelu"); n > 0)
    out.push_back(fmt::format("Gelu x{} recognised from Erf/Tanh chains", n));
  if (const int64_t n = count(before, "Identity") - count(after, "Identity"); n > 0)
    out.push_back(fmt::format("Identity x{} removed", n));
  out.push_back(fmt::format("simplified {} -> {} nodes (constant folding, dead code, fusions; docs/passes.md)",
                            imported.nodes.size(), simplified.nodes.size()));
  return out;
}

}  // namespace dc
