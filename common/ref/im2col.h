// Sliding-window geometry shared by Conv and the pooling ops, and im2col, which unfolds
// the windows of one image into the columns of a matrix so that Conv becomes a GEMM.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/shape.h"

namespace dc::ref {

// Window geometry over 1 to 3 spatial dims, stored right-aligned in 3 slots: a 2-D window
// has slot 0 set to the neutral extent 1 (in = kernel = out = 1, stride = dilation = 1, no
// padding), so every kernel can loop over three dims whatever the rank.
struct Window {
  static constexpr int kMaxRank = 3;
  using Dims = std::array<int64_t, kMaxRank>;

  int rank = 0;  // spatial rank, 1..3
  Dims in{1, 1, 1}, kernel{1, 1, 1}, stride{1, 1, 1}, dilation{1, 1, 1};
  Dims pad_begin{0, 0, 0}, pad_end{0, 0, 0}, out{1, 1, 1};

  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t kernel_size() const { return kernel[0] * kernel[1] * kernel[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  // The last `rank` output extents, for building output shapes.
  std::vector<int64_t> out_dims() const;
  // A 1x..x1 kernel with stride 1 and no padding: the window is the input itself.
  bool is_pointwise() const;
};

struct WindowRules {
  std::string_view op;     // for messages
  bool ceil_mode = false;  // the op reads a "ceil_mode" attribute (pooling)
};

// The node's auto_pad attribute (default NOTSET); UserError unless NOTSET, SAME_UPPER,
// SAME_LOWER or VALID. Shared by Conv, the pools and ConvTranspose.
std::string read_auto_pad(const Node& node);

// Reads strides, pads, dilations, auto_pad (NOTSET, SAME_UPPER, SAME_LOWER, VALID) and
// ceil_mode from `node` and derives the output extents by ONNX's rules, for input spatial
// extents `in` and kernel extents `kernel`. UserError naming the attribute and its allowed
// range for anything malformed, and "unsupported" for more than 3 spatial dims.
Window make_window(const Node& node, const WindowRules& rules, const std::vector<int64_t>& in,
                   const std::vector<int64_t>& kernel);

// Unfolds channels [0, channels) of one image x (channels x in-extents, contiguous) into
// col, a (channels * kernel_size) x out_size row-major matrix: row (c, kd, kh, kw) holds
// the input value under that kernel tap for every output position, 0 where it falls in
// padding. Rows are filled in parallel unless `parallel` is false.
void im2col(const float* x, int64_t channels, const Window& w, float* col, bool parallel = true);

}  // namespace dc::ref
