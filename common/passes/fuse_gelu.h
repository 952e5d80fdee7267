// Recognises the erf form of GELU that exporters decompose it into.
#pragma once

#include "ir/graph.h"

namespace dc {

// Replaces, for f32 x, with u = Div(x, sqrt(2)) or Mul(x, 1/sqrt(2)) and
// a = Add(Erf(u), 1), any of
//   Mul(Mul(x, a), 0.5)      Mul(Mul(x, 0.5), a)      Mul(Mul(a, 0.5), x)
// (operands of Mul and Add in either order) by one Gelu(x; approximate="none") named after
// the last matched node. Constants must be one-element initializers within 1e-4 relative
// of the expected value, and every intermediate must be read by nothing else and not be a
// graph output; x itself may have other readers.
Graph fuse_gelu(Graph g);

}  // namespace dc
