#include "state_alias.h"

#include <algorithm>

#include <fmt/format.h>

#include "template_optimizer.h"

namespace dc {

namespace {

const PlanTensor& tensor(const ExecPlan& p, int id) { return p.tensors[static_cast<size_t>(id)]; }

// The tensor whose bytes `id` names: itself, or the tensor a view views.
int bytes_of(const ExecPlan& p, int id) {
  const PlanTensor& t = tensor(p, id);
  return t.kind == PlanTensorKind::view ? t.view_of : id;
}

std::string step_ref(const ExecPlan& p, size_t s) { return fmt::format("step {} ({})", s, p.steps[s].cluster); }

}  // namespace

bool is_in_place(const ExecPlan& p, const PlanStateUpdate& u) {
  const PlanTensor& n = tensor(p, u.next);
  return n.kind == PlanTensorKind::view && n.view_of == u.state;
}

std::string in_place_problem(const ExecPlan& p, const PlanStateUpdate& u) {
  const std::string& state = tensor(p, u.state).name;
  const std::string& next = tensor(p, u.next).name;
  int writer = -1;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const auto& bufs = p.modules[static_cast<size_t>(p.steps[s].module)].buffers;
    for (size_t j = 0; j < bufs.size(); ++j) {
      if (bufs[j].role == BufferRole::input || p.steps[s].buffers[j] != u.next) continue;
      if (writer >= 0 && writer != static_cast<int>(s))
        return fmt::format("'{}' is written by {} and {}", next, step_ref(p, static_cast<size_t>(writer)), step_ref(p, s));
      writer = static_cast<int>(s);
    }
  }
  if (writer < 0) return fmt::format("no step writes '{}'", next);
  const GeneratedKernel& k = p.modules[static_cast<size_t>(p.steps[static_cast<size_t>(writer)].module)];
  if (!is_optimizer_update_kernel(k))
    return fmt::format("{} writes '{}' with kernel {} ({}), not an optimizer update, which may read other "
                       "elements of '{}' while it writes",
                       step_ref(p, static_cast<size_t>(writer)), next, k.launches.empty() ? "?" : k.launches[0].kernel,
                       k.template_name, state);
  int reads_in_writer = 0;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const auto& bufs = p.modules[static_cast<size_t>(p.steps[s].module)].buffers;
    for (size_t j = 0; j < bufs.size(); ++j) {
      if (bufs[j].role != BufferRole::input) continue;
      const int id = p.steps[s].buffers[j];
      const auto at = static_cast<int>(s);
      if (id == u.next && at <= writer)
        return fmt::format("{} reads '{}' before {} writes it", step_ref(p, s), next,
                           step_ref(p, static_cast<size_t>(writer)));
      if (id == u.next || bytes_of(p, id) != u.state) continue;
      if (at > writer)
        return fmt::format("{} reads '{}' after {} has written its next value", step_ref(p, s), state,
                           step_ref(p, static_cast<size_t>(writer)));
      if (at == writer && ++reads_in_writer > 1)
        return fmt::format("{} reads '{}' through more than one buffer", step_ref(p, s), state);
    }
  }
  return "";
}

int alias_state_updates(ExecPlan& p) {
  if (!p.training) return 0;
  int aliased = 0;
  for (const PlanStateUpdate& u : p.training->state) {
    if (is_in_place(p, u) || !in_place_problem(p, u).empty()) continue;
    PlanTensor& n = p.tensors[static_cast<size_t>(u.next)];
    n.kind = PlanTensorKind::view;
    n.view_of = u.state;
    n.offset = 0;
    n.first_step = n.last_step = -1;
    p.outputs.erase(std::find(p.outputs.begin(), p.outputs.end(), u.next));
    ++aliased;
  }
  return aliased;
}

std::vector<PlanStateUpdate> copied_state_updates(const ExecPlan& p) {
  std::vector<PlanStateUpdate> out;
  if (!p.training) return out;
  for (const PlanStateUpdate& u : p.training->state)
    if (!is_in_place(p, u)) out.push_back(u);
  return out;
}

}  // namespace dc
