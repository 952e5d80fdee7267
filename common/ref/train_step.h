// Training steps on the CPU reference executor: the oracle for training plans, and what
// `dc-coordinator verify --train` runs.
#pragma once

#include "ir/graph.h"
#include "ref/executor.h"

namespace dc::ref {

// Runs one step of a training graph (passes/build_training_graph.h) on `inputs` (the model's
// runtime inputs and the labels) and writes every STATE@next back into g's initializer
// STATE, so that the next call runs the next step. Returns the step's outputs (loss first).
TensorMap run_training_step(Graph& g, const TensorMap& inputs);

// The loss output's value as a double.
double loss_value(const Graph& g, const TensorMap& outputs);

}  // namespace dc::ref
