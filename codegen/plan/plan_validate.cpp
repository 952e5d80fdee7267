// validate_plan: the structural rules of a plan (codegen/plan/plan_io.h), each failure a
// UserError "<what>: <field path as in plan.json>: <problem>".
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "ir/error.h"
#include "plan_format.h"
#include "plan_io.h"
#include "state_alias.h"

namespace dc {

namespace {

// Far beyond any device; keeps offset + bytes clear of int64 overflow.
constexpr int64_t kMaxBytes = int64_t{1} << 56;

std::string type_str(DType t, const Shape& s) {
  return fmt::format("{} {}", dtype_name(t), shape_str(s));
}

std::string tensor_ref(const ExecPlan& p, int id) {
  return fmt::format("tensors[{}] '{}'", id, p.tensors[static_cast<size_t>(id)].name);
}

bool in_range(int64_t i, size_t n) { return i >= 0 && static_cast<uint64_t>(i) < n; }

bool in_arena(PlanTensorKind k) { return k == PlanTensorKind::intermediate || k == PlanTensorKind::scratch; }

void check_tensor(const ExecPlan& p, size_t i, const std::string& what) {
  const PlanTensor& t = p.tensors[i];
  const std::string where = fmt::format("{}: tensors[{}] '{}'", what, i, t.name);
  DC_USER_CHECK(!t.name.empty(), what, ": tensors[", i, "]: empty name");
  DC_USER_CHECK(t.dtype != DType::undefined, where, ": undefined dtype");
  int64_t numel = 1;
  for (int64_t d : t.shape) {
    DC_USER_CHECK(d >= 0, where, ": negative dimension in ", shape_str(t.shape));
    DC_USER_CHECK(d == 0 || numel <= kMaxBytes / d, where, ": shape ", shape_str(t.shape), " is too large");
    numel *= d;
  }
  if (t.kind == PlanTensorKind::view) {
    DC_USER_CHECK(in_range(t.view_of, p.tensors.size()) && t.view_of != static_cast<int>(i), where,
                  ": view_of ", t.view_of, " is not another tensor of the plan");
    const PlanTensor& base = p.tensors[static_cast<size_t>(t.view_of)];
    DC_USER_CHECK(base.kind != PlanTensorKind::view && base.kind != PlanTensorKind::scratch, where,
                  ": a view of ", plan_tensor_kind_name(base.kind), " ", tensor_ref(p, t.view_of));
    DC_USER_CHECK(t.offset >= 0 && t.offset % kPlanAlignment == 0 && t.offset <= base.bytes() &&
                      t.bytes() <= base.bytes() - t.offset,
                  where, ": bytes [", t.offset, ", ", t.offset + t.bytes(), ") are not aligned bytes of ",
                  tensor_ref(p, t.view_of), " (", base.bytes(), " bytes)");
    return;
  }
  if (t.kind == PlanTensorKind::weight || in_arena(t.kind))
    DC_USER_CHECK(t.offset >= 0 && t.offset <= kMaxBytes && t.offset % kPlanAlignment == 0, where, ": offset ",
                  t.offset, " is not a non-negative multiple of ", kPlanAlignment);
  if (!in_arena(t.kind)) return;
  DC_USER_CHECK(t.offset <= p.arena_bytes && t.bytes() <= p.arena_bytes - t.offset, where, ": bytes [", t.offset,
                ", ", t.offset + t.bytes(), ") lie outside the arena of ", p.arena_bytes, " bytes");
  DC_USER_CHECK(0 <= t.first_step && t.first_step <= t.last_step && in_range(t.last_step, p.steps.size()),
                where, ": live steps ", t.first_step, "..", t.last_step, " are not a range within the ",
                p.steps.size(), " steps");
  DC_USER_CHECK(t.kind != PlanTensorKind::scratch || t.first_step == t.last_step, where,
                ": scratch live over steps ", t.first_step, "..", t.last_step, " instead of one step");
}

std::vector<int> ids_of_kind(const ExecPlan& p, bool (*pick)(PlanTensorKind)) {
  std::vector<int> ids;
  for (size_t i = 0; i < p.tensors.size(); ++i)
    if (pick(p.tensors[i].kind)) ids.push_back(static_cast<int>(i));
  const auto offset = [&](int id) { return p.tensors[static_cast<size_t>(id)].offset; };
  std::sort(ids.begin(), ids.end(), [&](int a, int b) { return offset(a) < offset(b); });
  return ids;
}

// Weights: disjoint byte ranges of weights.bin.
void check_weight_layout(const ExecPlan& p, const std::string& what) {
  const auto ids = ids_of_kind(p, [](PlanTensorKind k) { return k == PlanTensorKind::weight; });
  for (size_t k = 1; k < ids.size(); ++k) {
    const PlanTensor& prev = p.tensors[static_cast<size_t>(ids[k - 1])];
    DC_USER_CHECK(prev.offset + prev.bytes() <= p.tensors[static_cast<size_t>(ids[k])].offset, what, ": ",
                  tensor_ref(p, ids[k - 1]), " and ", tensor_ref(p, ids[k]), " overlap in weights.bin");
  }
}

// Intermediates and scratch: two tensors live at a common step never share a byte. Sorted by
// offset, each tensor is compared only with those that start inside it.
void check_arena(const ExecPlan& p, const std::string& what) {
  const auto ids = ids_of_kind(p, in_arena);
  for (size_t a = 0; a < ids.size(); ++a) {
    const PlanTensor& x = p.tensors[static_cast<size_t>(ids[a])];
    for (size_t b = a + 1; b < ids.size(); ++b) {
      const PlanTensor& y = p.tensors[static_cast<size_t>(ids[b])];
      if (y.offset >= x.offset + x.bytes()) break;
      if (y.bytes() == 0 || y.first_step > x.last_step || x.first_step > y.last_step) continue;
      throw_user_error(what, ": ", tensor_ref(p, ids[a]), " (steps ", x.first_step, "..", x.last_step,
                       ") and ", tensor_ref(p, ids[b]), " (steps ", y.first_step, "..", y.last_step,
                       ") overlap in the arena");
    }
  }
}

// inputs / outputs: each tensor of that kind exactly once.
void check_io_list(const ExecPlan& p, const std::vector<int>& list, PlanTensorKind kind,
                   const std::string& where) {
  std::set<int> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const int id = list[i];
    DC_USER_CHECK(in_range(id, p.tensors.size()), where, "[", i, "]: tensor ", id, " is out of range (",
                  p.tensors.size(), " tensors)");
    DC_USER_CHECK(p.tensors[static_cast<size_t>(id)].kind == kind, where, "[", i, "]: ", tensor_ref(p, id),
                  " is ", plan_tensor_kind_name(p.tensors[static_cast<size_t>(id)].kind), ", not ",
                  plan_tensor_kind_name(kind));
    DC_USER_CHECK(seen.insert(id).second, where, "[", i, "]: ", tensor_ref(p, id), " is listed twice");
  }
  for (size_t i = 0; i < p.tensors.size(); ++i)
    DC_USER_CHECK(p.tensors[i].kind != kind || seen.count(static_cast<int>(i)), where, ": ",
                  tensor_ref(p, static_cast<int>(i)), " is missing");
}

void check_module(const GeneratedKernel& m, const std::string& where) {
  for (size_t j = 0; j < m.buffers.size(); ++j)
    for (int64_t d : m.buffers[j].shape)
      DC_USER_CHECK(d >= 0, where, ".buffers[", j, "]: negative dimension in ", shape_str(m.buffers[j].shape));
  for (size_t l = 0; l < m.launches.size(); ++l) {
    const Launch& launch = m.launches[l];
    const std::string at = fmt::format("{}.launches[{}]", where, l);
    DC_USER_CHECK(!launch.kernel.empty(), at, ": empty kernel name");
    for (int k = 0; k < 3; ++k)
      DC_USER_CHECK(launch.grid[k] >= 1 && launch.block[k] >= 1, at, ": grid and block extents must be >= 1");
    DC_USER_CHECK(launch.dynamic_smem_bytes >= 0, at, ": negative dynamic_smem_bytes");
    for (int a : launch.args)
      DC_USER_CHECK(in_range(a, m.buffers.size()), at, ": argument ", a, " is out of range (",
                    m.buffers.size(), " buffers)");
  }
}

// Binding `id` to buffer `b` at step `s`: types agree, roles agree with kinds, reads follow
// writes. written[t] is the first step that wrote tensor t (-1: none yet).
// in_place: the STATE@next views of aliased state pairs, the only tensors through which a step
// writes a weight (check_training checks that each is safe).
void check_binding(const ExecPlan& p, int s, const KernelBuffer& b, int bound, std::vector<int>& written,
                   const std::set<int>& in_place, const std::string& at) {
  const PlanTensor& v = p.tensors[static_cast<size_t>(bound)];
  DC_USER_CHECK(v.dtype == b.dtype && v.shape == b.shape, at, ": ", tensor_ref(p, bound), " (",
                type_str(v.dtype, v.shape), ") does not match the module's buffer '", b.name, "' (",
                type_str(b.dtype, b.shape), ")");
  // A view is read and written through the tensor whose bytes it is.
  const int id = v.kind == PlanTensorKind::view ? v.view_of : bound;
  const PlanTensor& t = p.tensors[static_cast<size_t>(id)];
  const char* kind = plan_tensor_kind_name(t.kind);
  const int first_write = written[static_cast<size_t>(id)];
  if (b.role == BufferRole::input) {
    DC_USER_CHECK(t.kind != PlanTensorKind::scratch, at, ": reads scratch ", tensor_ref(p, id));
    DC_USER_CHECK(t.kind == PlanTensorKind::input || t.kind == PlanTensorKind::weight || first_write >= 0,
                  at, ": reads ", kind, " ", tensor_ref(p, id), " before any step writes it");
    DC_USER_CHECK(t.kind != PlanTensorKind::intermediate || s <= t.last_step, at, ": reads ",
                  tensor_ref(p, id), " after its last_step ", t.last_step);
    return;
  }
  DC_USER_CHECK(t.kind != PlanTensorKind::input && (t.kind != PlanTensorKind::weight || in_place.count(bound)), at,
                ": writes ", kind, " ", tensor_ref(p, id));
  DC_USER_CHECK(!in_arena(t.kind) || (t.first_step <= s && s <= t.last_step), at, ": writes ",
                tensor_ref(p, id), " outside its live steps ", t.first_step, "..", t.last_step);
  if (first_write < 0) written[static_cast<size_t>(id)] = s;
}

void check_steps(const ExecPlan& p, const std::string& what) {
  std::vector<int> written(p.tensors.size(), -1);
  std::set<int> in_place;
  if (p.training)
    for (const PlanStateUpdate& u : p.training->state)
      if (in_range(u.state, p.tensors.size()) && in_range(u.next, p.tensors.size()) && is_in_place(p, u))
        in_place.insert(u.next);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const PlanStep& step = p.steps[s];
    const std::string where = fmt::format("{}: steps[{}]", what, s);
    DC_USER_CHECK(in_range(step.module, p.modules.size()), where, ".module: ", step.module,
                  " is out of range (", p.modules.size(), " modules)");
    const GeneratedKernel& m = p.modules[static_cast<size_t>(step.module)];
    DC_USER_CHECK(step.buffers.size() == m.buffers.size(), where, ".buffers: ", step.buffers.size(),
                  " tensors bound to module ", step.module, " with ", m.buffers.size(), " buffers");
    DC_USER_CHECK(std::isfinite(step.measured_us) && std::isfinite(step.estimated_us), where,
                  ": times must be finite");
    for (size_t j = 0; j < step.buffers.size(); ++j)
      DC_USER_CHECK(in_range(step.buffers[j], p.tensors.size()), where, ".buffers[", j, "]: tensor ",
                    step.buffers[j], " is out of range (", p.tensors.size(), " tensors)");
    // Reads first: a step that reads and writes one tensor reads the previous value.
    for (BufferRole pass : {BufferRole::input, BufferRole::output})
      for (size_t j = 0; j < step.buffers.size(); ++j)
        if ((m.buffers[j].role == BufferRole::input) == (pass == BufferRole::input))
          check_binding(p, static_cast<int>(s), m.buffers[j], step.buffers[j], written, in_place,
                        fmt::format("{}.buffers[{}]", where, j));
  }
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const PlanTensor& t = p.tensors[i];
    if (in_arena(t.kind))
      DC_USER_CHECK(written[i] == t.first_step, what, ": ", tensor_ref(p, static_cast<int>(i)),
                    ": first_step ", t.first_step, " is not the first step that writes it");
    if (t.kind == PlanTensorKind::output)
      DC_USER_CHECK(written[i] >= 0, what, ": ", tensor_ref(p, static_cast<int>(i)), ": no step writes it");
  }
}

// A training plan's state: each a weight updated from an output of its type after the step;
// the loss and the model's outputs come first.
void check_training(const ExecPlan& p, const std::string& what) {
  if (!p.training) return;
  const PlanTraining& t = *p.training;
  DC_USER_CHECK(t.model_outputs >= 1 && static_cast<size_t>(t.model_outputs) <= p.outputs.size(), what,
                ": training.model_outputs ", t.model_outputs, " is outside [1, ", p.outputs.size(), "]");
  std::set<int> states, nexts;
  for (size_t i = 0; i < t.state.size(); ++i) {
    const PlanStateUpdate& u = t.state[i];
    const std::string at = fmt::format("{}: training.state[{}]", what, i);
    DC_USER_CHECK(in_range(u.state, p.tensors.size()) && in_range(u.next, p.tensors.size()), at,
                  ": tensor out of range (", p.tensors.size(), " tensors)");
    const PlanTensor &s = p.tensors[static_cast<size_t>(u.state)], &n = p.tensors[static_cast<size_t>(u.next)];
    DC_USER_CHECK(s.kind == PlanTensorKind::weight, at, ": ", tensor_ref(p, u.state), " is not a weight");
    const auto pos = std::find(p.outputs.begin(), p.outputs.end(), u.next) - p.outputs.begin();
    DC_USER_CHECK((n.kind == PlanTensorKind::output && pos >= t.model_outputs) || is_in_place(p, u), at, ": ",
                  tensor_ref(p, u.next), " is neither an output after the model's nor a view of ",
                  tensor_ref(p, u.state));
    DC_USER_CHECK(s.dtype == n.dtype && s.shape == n.shape, at, ": ", tensor_ref(p, u.state), " (",
                  type_str(s.dtype, s.shape), ") and ", tensor_ref(p, u.next), " (", type_str(n.dtype, n.shape),
                  ") differ");
    DC_USER_CHECK(states.insert(u.state).second && nexts.insert(u.next).second, at, ": a tensor is listed twice");
    if (!is_in_place(p, u)) continue;
    DC_USER_CHECK(n.offset == 0, at, ": ", tensor_ref(p, u.next), " views ", tensor_ref(p, u.state),
                  " at offset ", n.offset, ", not 0");
    const std::string problem = in_place_problem(p, u);
    DC_USER_CHECK(problem.empty(), at, ": ", tensor_ref(p, u.next), " cannot update ", tensor_ref(p, u.state),
                  " in place: ", problem);
  }
}

}  // namespace

void validate_plan_structure(const ExecPlan& p, const std::string& what) {
  DC_USER_CHECK(p.format == kPlanFormat, what, ": format '", p.format, "' is not ", kPlanFormat);
  DC_USER_CHECK(p.arena_bytes >= 0 && p.unshared_bytes >= 0, what, ": negative arena_bytes or unshared_bytes");
  DC_USER_CHECK(std::isfinite(p.measured_total_us) && std::isfinite(p.estimated_total_us), what,
                ": total times must be finite");
  for (size_t i = 0; i < p.tensors.size(); ++i) check_tensor(p, i, what);
  check_weight_layout(p, what);
  check_arena(p, what);
  check_io_list(p, p.inputs, PlanTensorKind::input, what + ": inputs");
  check_io_list(p, p.outputs, PlanTensorKind::output, what + ": outputs");
  for (size_t m = 0; m < p.modules.size(); ++m) check_module(p.modules[m], fmt::format("{}: modules[{}]", what, m));
  check_steps(p, what);
  check_training(p, what);
}

void validate_plan_values(const ExecPlan& p, const std::string& what) {
  bool has_weights = false;
  for (const auto& t : p.tensors) has_weights |= t.kind == PlanTensorKind::weight;
  DC_USER_CHECK(p.values.size() == p.tensors.size() || (p.values.empty() && !has_weights), what, ": ",
                p.values.size(), " values for ", p.tensors.size(), " tensors");
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const PlanTensor& t = p.tensors[i];
    if (t.kind != PlanTensorKind::weight) continue;
    const Tensor& v = p.values[i];
    DC_USER_CHECK(v.defined(), what, ": ", tensor_ref(p, static_cast<int>(i)), ": no value");
    DC_USER_CHECK(v.dtype() == t.dtype && v.shape() == t.shape, what, ": ", tensor_ref(p, static_cast<int>(i)),
                  ": value is ", type_str(v.dtype(), v.shape()), ", the tensor ", type_str(t.dtype, t.shape));
  }
}

void validate_plan(const ExecPlan& plan, const std::string& what) {
  validate_plan_structure(plan, what);
  validate_plan_values(plan, what);
}

}  // namespace dc
