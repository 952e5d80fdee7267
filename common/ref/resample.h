// The geometry of Pad and Resize/Upsample, computed once from the node and the values of its
// parameter inputs, and shared by the CPU reference kernels (ops_resample.cpp) and the code
// generator (codegen/value_emitter_resample.cpp), so that both read the same input elements
// with the same weights.
//
// Resize is separable: along each axis, output coordinate o reads `taps` input positions
// idx[o * taps + j] with weights weight[o * taps + j] (nearest: 1 tap, linear: 2, cubic: 4;
// indices already clamped to the input, weights of excluded taps already 0). An axis whose
// output equals its input under the identity map has taps == 0 (read at o itself). With
// tf_crop_and_resize, an output coordinate whose source lies outside the input is
// `outside[o]`: the element is extrapolation_value.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace dc::ref {

enum class PadMode { constant, reflect, edge, wrap };

struct PadSpec {
  PadMode mode = PadMode::constant;
  std::vector<int64_t> begin, end;  // per input axis; negative values crop
  double value = 0;                 // the fill of constant mode
};

// `params[i]` is the value of node input i (undefined Tensor when absent); params[0] (the
// data) is not read. Pads as attributes (opset < 11: `pads`, or opset 1's `paddings`, and
// `value`) or inputs (pads, constant_value, opset 18's axes). UserError for malformed ones.
PadSpec pad_spec(const Node& n, const Shape& in, const std::vector<Tensor>& params);
Shape pad_output_shape(const PadSpec& p, const Shape& in);
// The input position read for position `i` (the output position minus the begin pad) along
// an axis of extent `n`: i itself inside, reflected/clamped/wrapped outside, or -1 (constant
// mode's fill).
int64_t pad_source(PadMode mode, int64_t i, int64_t n);
const char* pad_mode_name(PadMode m);

struct ResizeAxis {
  int64_t in = 1, out = 1;
  int taps = 0;  // 0: output position o reads input position o (identity axis)
  std::vector<int64_t> idx;
  std::vector<float> weight;
  std::vector<char> outside;  // tf_crop_and_resize: the element is the extrapolation value
};

struct ResizeSpec {
  std::vector<ResizeAxis> axes;  // one per input dim
  float extrapolation_value = 0.f;
  bool any_outside = false;
  Shape out_shape;
};

// Resize (opsets 10..19: X, roi, scales, sizes) and Upsample (opsets 7..9: scales as the
// attribute or input 1). UserError naming the attribute for malformed or unsupported forms
// (antialias, modes outside the spec).
ResizeSpec resize_spec(const Node& n, const Shape& in, const std::vector<Tensor>& params);
// Attribute checks alone (no parameter values needed): what import can refuse up front.
void check_resize_attrs(const Node& n);
void check_pad_attrs(const Node& n);

}  // namespace dc::ref
