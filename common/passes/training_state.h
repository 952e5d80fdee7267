// How a training graph carries state from one step to the next.
//
// Weights, optimizer state (momentum, Adam moments), BatchNorm running statistics and the
// step counter are initializers of the training graph. Each has a graph output named
// STATE + kNextSuffix holding its value after the step; a runner (ref/train_step.h, later
// the device runtime) writes that value back into STATE, in place, before the next step.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/state_names.h"

namespace dc {

struct StateUpdate {
  std::string state;  // an initializer
  std::string next;   // the graph output holding its value after the step
};

// Every graph output STATE@next whose STATE is an initializer, in output order.
std::vector<StateUpdate> training_state_updates(const Graph& g);

// True for a graph that build_training_graph made (it has the step counter's update).
bool is_training_graph(const Graph& g);

}  // namespace dc
