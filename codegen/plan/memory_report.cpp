#include "plan/memory_report.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "ir/state_names.h"
#include "plan/memory_plan.h"

namespace dc {

namespace {

constexpr size_t kLargestSaved = 3;

bool is_optimizer_state(const std::string& name) {
  return name == kStepTensor || name.ends_with("@momentum") || name.ends_with("@adam_m") ||
         name.ends_with("@adam_v");
}

// The step after the one that writes the loss (outputs[0]), directly or through a view.
int first_backward_step(const ExecPlan& p) {
  if (p.outputs.empty()) return -1;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const auto& bufs = p.modules[static_cast<size_t>(p.steps[s].module)].buffers;
    for (size_t j = 0; j < bufs.size(); ++j) {
      const PlanTensor& t = p.tensors[static_cast<size_t>(p.steps[s].buffers[j])];
      const int id = t.kind == PlanTensorKind::view ? t.view_of : p.steps[s].buffers[j];
      if (bufs[j].role == BufferRole::output && id == p.outputs[0]) return static_cast<int>(s) + 1;
    }
  }
  return -1;
}

bool runs_an_update(const PlanStep& step) {
  return std::any_of(step.nodes.begin(), step.nodes.end(), [](const std::string& n) { return n.starts_with("optimizer/"); });
}

// Trained weights: the weights an optimizer update ("optimizer/W" or a bucket
// "optimizer/bucket<k>") reads, less the optimizer's own state.
std::set<std::string> trained_weights(const ExecPlan& p) {
  std::set<std::string> out;
  for (const auto& step : p.steps) {
    if (!runs_an_update(step)) continue;
    const auto& bufs = p.modules[static_cast<size_t>(step.module)].buffers;
    for (size_t j = 0; j < bufs.size(); ++j) {
      const PlanTensor& t = p.tensors[static_cast<size_t>(step.buffers[j])];
      if (bufs[j].role == BufferRole::input && t.kind == PlanTensorKind::weight && !is_optimizer_state(t.name))
        out.insert(t.name);
    }
  }
  return out;
}

void count_weights(const ExecPlan& p, PlanMemoryReport& m) {
  std::set<int> state;
  if (p.training)
    for (const auto& u : p.training->state) state.insert(u.state);
  const std::set<std::string> trained = trained_weights(p);
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const PlanTensor& t = p.tensors[i];
    if (t.kind != PlanTensorKind::weight) continue;
    if (!p.training || trained.count(t.name)) m.weights += t.bytes();
    else if (is_optimizer_state(t.name)) m.optimizer_state += t.bytes();
    else if (state.count(static_cast<int>(i))) m.other_state += t.bytes();
    else m.constants += t.bytes();
  }
}

void count_io(const ExecPlan& p, PlanMemoryReport& m) {
  const size_t model_outputs = p.training ? static_cast<size_t>(p.training->model_outputs) : p.outputs.size();
  for (int id : p.inputs) m.io += p.tensors[static_cast<size_t>(id)].bytes();
  for (size_t k = 0; k < p.outputs.size(); ++k)
    (k < model_outputs ? m.io : m.state_next) += p.tensors[static_cast<size_t>(p.outputs[k])].bytes();
}

// Arena tensors read by an optimizer update.
int64_t gradient_bytes(const ExecPlan& p) {
  std::set<int> grads;
  for (const auto& step : p.steps) {
    if (!runs_an_update(step)) continue;
    const auto& bufs = p.modules[static_cast<size_t>(step.module)].buffers;
    for (size_t j = 0; j < bufs.size(); ++j) {
      int id = step.buffers[j];
      if (p.tensors[static_cast<size_t>(id)].kind == PlanTensorKind::view) id = p.tensors[static_cast<size_t>(id)].view_of;
      if (bufs[j].role == BufferRole::input && p.tensors[static_cast<size_t>(id)].kind == PlanTensorKind::intermediate)
        grads.insert(id);
    }
  }
  int64_t bytes = 0;
  for (int id : grads) bytes += p.tensors[static_cast<size_t>(id)].bytes();
  return bytes;
}

void count_arena(const ExecPlan& p, PlanMemoryReport& m) {
  std::vector<MemoryRequest> requests;
  std::vector<TensorBytes> saved;
  for (const PlanTensor& t : p.tensors) {
    if (t.kind != PlanTensorKind::intermediate && t.kind != PlanTensorKind::scratch) continue;
    if (t.first_step < 0) continue;
    requests.push_back({std::max<int64_t>(t.bytes(), 1), t.first_step, t.last_step});
    if (t.kind == PlanTensorKind::intermediate && m.backward_step >= 0 && t.first_step < m.backward_step &&
        t.last_step >= m.backward_step)
      saved.push_back({t.name, t.bytes()});
  }
  m.arena = p.arena_bytes;
  m.arena_peak_live = peak_live_bytes(requests, kPlanAlignment);
  m.saved_count = static_cast<int>(saved.size());
  for (const auto& s : saved) m.saved_bytes += s.bytes;
  std::stable_sort(saved.begin(), saved.end(), [](const TensorBytes& a, const TensorBytes& b) { return a.bytes > b.bytes; });
  saved.resize(std::min(saved.size(), kLargestSaved));
  m.largest_saved = std::move(saved);
}

std::string mib(int64_t bytes) { return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

PlanMemoryReport memory_report(const ExecPlan& p) {
  PlanMemoryReport m;
  m.backward_step = p.training ? first_backward_step(p) : -1;
  count_weights(p, m);
  count_io(p, m);
  if (p.training) m.gradients = gradient_bytes(p);
  count_arena(p, m);
  m.total = m.weights + m.optimizer_state + m.other_state + m.constants + m.io + m.state_next + m.arena;
  return m;
}

std::vector<std::string> memory_report_lines(const PlanMemoryReport& m) {
  std::vector<std::string> out;
  if (m.backward_step < 0) {
    out.push_back(fmt::format("device memory {}: weights {}, inputs/outputs {}, arena {} (peak live {})",
                              mib(m.total), mib(m.weights + m.constants), mib(m.io), mib(m.arena),
                              mib(m.arena_peak_live)));
    return out;
  }
  out.push_back(fmt::format("device memory of a step {}: weights {}, optimizer state {}, other state {}, "
                            "constants {}, inputs/outputs {}, next state {}, arena {} (peak live {})",
                            mib(m.total), mib(m.weights), mib(m.optimizer_state), mib(m.other_state),
                            mib(m.constants), mib(m.io), mib(m.state_next), mib(m.arena), mib(m.arena_peak_live)));
  std::string largest;
  for (const auto& t : m.largest_saved) largest += fmt::format("{}{} {}", largest.empty() ? "" : ", ", t.name, mib(t.bytes));
  out.push_back(fmt::format("in the arena: activations kept for the backward pass {} in {} tensors (largest: {}); "
                            "gradients {}", mib(m.saved_bytes), m.saved_count, largest.empty() ? "none" : largest,
                            mib(m.gradients)));
  return out;
}

}  // namespace dc
