// In-place training state (docs/training.md "State between steps", docs/plan-format.md
// "In-place state"). A training plan's state pair (STATE, STATE@next) is aliased when
// STATE@next is a `view` of STATE (offset 0): the step that computes the next value writes it
// into the weight itself, the pair is not in `outputs`, and the runtime copies nothing after
// the step. Safe when no step after that one reads the old value and the step's kernel
// updates element by element (is_optimizer_update_kernel): then the state is held once.
#pragma once

#include <string>
#include <vector>

#include "plan.h"

namespace dc {

// True when the pair's next tensor is a view of its state (the aliased form).
bool is_in_place(const ExecPlan& p, const PlanStateUpdate& u);

// Why writing u.next into u.state's bytes would be wrong, "" when it is safe: the step that
// writes u.next (exactly one) runs an optimizer update kernel that reads u.state through
// exactly one buffer, no later step reads u.state (or another view of it) and no earlier step
// reads u.next. Works on both forms of the pair: validate_plan asks it of aliased pairs,
// alias_state_updates of the others.
std::string in_place_problem(const ExecPlan& p, const PlanStateUpdate& u);

// Aliases every pair of p.training that is safe (in_place_problem ""): its next tensor
// becomes a view of the state and leaves `outputs`. Returns how many it aliased.
int alias_state_updates(ExecPlan& p);

// The pairs the runtime still copies after a step (those not aliased).
std::vector<PlanStateUpdate> copied_state_updates(const ExecPlan& p);

}  // namespace dc
