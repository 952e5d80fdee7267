// Static tensor shapes and the helpers every op needs (element counts, strides, axis
// normalisation, numpy broadcasting).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dc {

using Shape = std::vector<int64_t>;

// Product of dims; 1 for a scalar (rank 0).
int64_t shape_numel(const Shape& s);
// Row-major strides in elements.
std::vector<int64_t> shape_strides(const Shape& s);
// "1x3x224x224"; "scalar" for rank 0.
std::string shape_str(const Shape& s);
// Maps axis in [-rank, rank) to [0, rank); UserError naming `what` otherwise.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* what);
// Numpy multidirectional broadcast of two shapes; UserError if incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Strides of `s` read as if broadcast to `out` (0 where s has extent 1 or is missing).
std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out);

}  // namespace dc
