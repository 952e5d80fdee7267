// Recognises the erf and tanh forms of GELU that exporters decompose it into.
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
//
// The tanh approximation (GPT-2's NewGELUActivation, torch's gelu(approximate="tanh") as
// the dynamo exporter decomposes it) becomes Gelu(x; approximate="tanh"): the same three
// tails with a = Add(Tanh(Mul(Add(x, Mul(c, 0.044715)), sqrt(2/pi))), 1), where c is
// Pow(x, 3), Mul(Mul(x, x), x) or Mul(x, Mul(x, x)).
Graph fuse_gelu(Graph g);

}  // namespace dc
