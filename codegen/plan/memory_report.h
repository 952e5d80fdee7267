// The device memory of one run of a plan, by part (docs/plan-format.md, "memory";
// docs/training.md, "Memory"). Derived from the plan's tensors and the arena planner's
// liveness (a tensor is live from the step that writes it to the last step that reads it),
// never stored separately: plan.json's "memory" object is written from it and ignored on read.
//
// For a training plan the backward pass begins after the step that writes the loss; an
// activation kept for the backward pass is an arena tensor written before it begins and
// still live when it does (read by a backward step).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace dc {

struct TensorBytes {
  std::string name;
  int64_t bytes = 0;
};

struct PlanMemoryReport {
  // weights.bin on the device. Training: the trained weights, the optimizer state (momentum,
  // Adam moments, the step counter), other state (BatchNorm running statistics) and the
  // rest (constants). Inference: everything is `weights`.
  int64_t weights = 0;
  int64_t optimizer_state = 0;
  int64_t other_state = 0;
  int64_t constants = 0;
  int64_t io = 0;          // the inputs and the loss / model outputs (bound by the user)
  int64_t state_next = 0;  // the STATE@next outputs a training step writes
  // Arena tensors that an optimizer update reads: the gradients as materialized (each live
  // from its last backward contribution to its update).
  int64_t gradients = 0;
  // Activations kept for the backward pass (training plans only).
  int64_t saved_bytes = 0;
  int saved_count = 0;
  std::vector<TensorBytes> largest_saved;  // the largest few, largest first
  int backward_step = -1;                  // first step of the backward pass; -1: none
  int64_t arena = 0;            // arena_bytes: intermediates and scratch
  int64_t arena_peak_live = 0;  // the most arena bytes live at one step (a lower bound of arena)
  int64_t total = 0;            // every device buffer of the run: weights.bin, io, state_next, arena
};

PlanMemoryReport memory_report(const ExecPlan& p);

// Text lines for `plan` and `tune`'s summary: "memory    weights 1.2 MiB, ...".
std::vector<std::string> memory_report_lines(const PlanMemoryReport& m);

}  // namespace dc
