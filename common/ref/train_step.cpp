#include "ref/train_step.h"

#include "ir/error.h"
#include "passes/training_state.h"

namespace dc::ref {

TensorMap run_training_step(Graph& g, const TensorMap& inputs) {
  DC_INTERNAL_CHECK(is_training_graph(g), "run_training_step on a graph that is not a training graph");
  TensorMap out = run_graph(g, inputs);
  for (const StateUpdate& u : training_state_updates(g)) g.initializers[u.state] = out.at(u.next);
  return out;
}

double loss_value(const Graph& g, const TensorMap& outputs) {
  const Tensor& loss = outputs.at(g.outputs.at(0));
  return loss.to_float_vector().at(0);
}

}  // namespace dc::ref
