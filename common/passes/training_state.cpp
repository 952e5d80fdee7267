#include "passes/training_state.h"

#include <algorithm>

namespace dc {

std::vector<StateUpdate> training_state_updates(const Graph& g) {
  std::vector<StateUpdate> out;
  for (const auto& o : g.outputs) {
    if (o.size() <= kNextSuffix.size() || !o.ends_with(kNextSuffix)) continue;
    const std::string state = o.substr(0, o.size() - kNextSuffix.size());
    if (g.is_constant(state)) out.push_back({state, o});
  }
  return out;
}

bool is_training_graph(const Graph& g) {
  const std::string step_next = next_name(std::string(kStepTensor));
  return g.is_constant(std::string(kStepTensor)) &&
         std::find(g.outputs.begin(), g.outputs.end(), step_next) != g.outputs.end();
}

}  // namespace dc
