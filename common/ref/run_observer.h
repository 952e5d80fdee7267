// Test hook of the reference executor (defined in executor.cpp): tests use it to assert that
// import never runs a heavy op (tests/unit/test_static_shapes.cpp).
#pragma once

#include "ref/kernel.h"

namespace dc::ref {

// When set, called with every node run_node is about to run; null turns it off.
// Not thread-safe to change while something runs.
using RunNodeObserver = void (*)(const Node& node, const Inputs& inputs);
void set_run_node_observer(RunNodeObserver observer);

}  // namespace dc::ref
