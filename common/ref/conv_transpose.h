// ConvTranspose geometry (1-D to 3-D), shared by the CPU reference (ops_conv_transpose.cpp)
// and the implicit-GEMM template (codegen/template_gemm*.cpp).
//
// The transposed convolution is the data gradient of Conv: input position i scatters into
// output positions o = i * stride - pad_begin + tap * dilation. Read the other way, which is
// how the generated kernels gather, output position o takes tap `tap` from input position
// i = (o + pad_begin - tap * dilation) / stride when that division is exact and i lies in
// the input. The Window's `in` holds the input extents and `out` the output extents.
#pragma once

#include <cstdint>

#include "ir/graph.h"
#include "ref/im2col.h"

namespace dc::ref {

struct ConvTransposeGeometry {
  Window window;
  int64_t batch = 0, channels = 0, filters = 0, group = 1;  // filters: output channels M
};

// From the node's attributes (strides, dilations, pads, auto_pad, output_padding,
// output_shape, kernel_shape, group) and the shapes of X [N, C, ...] and W [C, M/group, k...].
// UserError naming the attribute for anything malformed; the bias shape is checked too.
ConvTransposeGeometry conv_transpose_geometry(const Node& node, const Shape& x, const Shape& w,
                                              const Shape* bias);

}  // namespace dc::ref
