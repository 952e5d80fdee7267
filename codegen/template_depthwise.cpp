// "depthwise_direct": direct convolution for Conv nodes whose groups each see one input
// channel (depthwise, with any channel multiplier), 1-D or 2-D, any stride, padding,
// auto_pad and dilation, + the cluster's fused epilogue (bias, scale, residual, activations).
// A block computes tile_h x tile_w output pixels of block_c output channels of one image:
// the input tile with its halo (every input channel those output channels read) and their
// weights are staged in shared memory, then each thread computes pixels_per_thread
// horizontally adjacent pixels of one channel, holding the input row segment under the
// kernel in registers across the kernel's width. Operands of any float storage (f32, f16,
// bf16) are staged as float; the math is fp32. docs/codegen.md.
#include <algorithm>

#include <fmt/format.h>

#include "generate.h"
#include "ir/error.h"
#include "ref/im2col.h"
#include "template_text.h"
#include "template_util.h"
#include "value_emitter.h"

namespace dc {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// The convolution's geometry and the variant's tiling.
struct DwLayout {
  bool two_d = false;
  int64_t images = 0, channels = 0, out_channels = 0, mult = 0;
  int64_t IH = 0, IW = 0, OH = 0, OW = 0, KH = 0, KW = 0, SH = 0, SW = 0, DH = 0, DW = 0, PH = 0, PW = 0;
  int64_t th = 0, tw = 0, bc = 0, ppt = 0, threads = 0;
  int64_t in_th = 0, in_tw = 0, in_c = 0;  // the staged input tile with its halo
  int64_t span = 0;                        // input columns under ppt pixels
  int64_t tiles_w = 0, grid_x = 0, grid_y = 0;
};

// The Conv's operands: float storage only, elementwise outputs, one input channel per group.
void check_depthwise(const Graph& g, const Node& conv) {
  const Shape& xs = g.info(conv.input(0)).shape;
  const Shape& ys = g.info(conv.outputs.at(0)).shape;
  DC_INTERNAL_CHECK(xs.size() == 3 || xs.size() == 4, "depthwise_direct: ", xs.size() - 2,
                    "-D convolution (1-D and 2-D only)");
  for (const auto& t : conv.inputs)
    if (!t.empty())
      DC_INTERNAL_CHECK(g.info(t).dtype == DType::f32 || g.info(t).dtype == DType::f16 ||
                            g.info(t).dtype == DType::bf16,
                        "depthwise_direct: float operands only (f32, f16, bf16), not ",
                        dtype_name(g.info(t).dtype));
  for (const auto& o : g.outputs)
    DC_INTERNAL_CHECK(g.info(o).shape == ys, "depthwise_direct: output '", o,
                      "' is not elementwise with the Conv output");
}

DwLayout depthwise_layout(const Graph& g, const Node& conv, const Variant& v) {
  const Shape& xs = g.info(conv.input(0)).shape;
  const Shape& ws = g.info(conv.input(1)).shape;
  DwLayout L;
  L.two_d = xs.size() == 4;
  const ref::Window win = ref::make_window(conv, {"Conv", false}, Shape(xs.begin() + 2, xs.end()),
                                           Shape(ws.begin() + 2, ws.end()));
  L.images = xs[0];
  L.channels = xs[1];
  L.out_channels = ws[0];
  const int64_t groups = conv.attrs.get_int("group", 1);
  DC_INTERNAL_CHECK(groups == L.channels && ws[1] == 1, "depthwise_direct: ", L.channels,
                    " input channels in ", groups,
                    " groups; this template needs one input channel per group");
  L.mult = L.out_channels / groups;  // output channels per input channel
  L.th = v.param("tile_h");
  L.tw = v.param("tile_w");
  L.bc = v.param("block_c");
  L.ppt = v.param("pixels_per_thread", 1);
  DC_INTERNAL_CHECK(L.th > 0 && L.tw > 0 && L.bc > 0 && L.ppt > 0 && L.tw % L.ppt == 0,
                    "depthwise_direct: bad parameters in ", v.key());
  L.threads = L.th * L.tw * L.bc / L.ppt;
  DC_INTERNAL_CHECK(L.threads >= 1 && L.threads <= 1024 &&
                        (v.threads_per_block == 0 || v.threads_per_block == L.threads),
                    "depthwise_direct: ", L.threads, " threads for ", v.key());
  L.IH = win.in[1], L.IW = win.in[2], L.OH = win.out[1], L.OW = win.out[2];
  L.KH = win.kernel[1], L.KW = win.kernel[2];
  L.SH = win.stride[1], L.SW = win.stride[2], L.DH = win.dilation[1], L.DW = win.dilation[2];
  L.PH = win.pad_begin[1], L.PW = win.pad_begin[2];
  L.in_th = (L.th - 1) * L.SH + (L.KH - 1) * L.DH + 1;
  L.in_tw = (L.tw - 1) * L.SW + (L.KW - 1) * L.DW + 1;
  // Input channels a block of block_c output channels reads (the most over all blocks).
  L.in_c = 1;
  for (int64_t c0 = 0; c0 < L.out_channels; c0 += L.bc) {
    const int64_t last = std::min(L.out_channels, c0 + L.bc) - 1;
    L.in_c = std::max(L.in_c, last / L.mult - c0 / L.mult + 1);
  }
  L.span = (L.ppt - 1) * L.SW + (L.KW - 1) * L.DW + 1;
  L.tiles_w = ceil_div(L.OW, L.tw);
  L.grid_x = L.tiles_w * ceil_div(L.OH, L.th);
  L.grid_y = ceil_div(L.out_channels, L.bc);
  DC_INTERNAL_CHECK(L.grid_y <= 65535 && L.images <= 65535, "depthwise_direct: grid ", L.grid_x, "x",
                    L.grid_y, "x", L.images, " exceeds CUDA's limits");
  return L;
}

// Coordinates of the input, weight and output, 1-D or 2-D.
std::vector<std::string> coords(bool two_d, std::vector<std::string> c) {
  if (!two_d) c.erase(c.begin() + 2);
  return c;
}

// The staged operands (input tile, zero in the padding; weights) and the epilogue per
// output pixel, through the cluster's ValueEmitter.
void operand_vars(TemplateVars& vars, const Graph& g, const Node& conv, bool two_d) {
  ValueEmitter ve(g);
  std::string xcode;
  vars["XV"] = ve.value(conv.input(0), coords(two_d, {"dc_img", "dc_ic", "dc_ih", "dc_iw"}), xcode);
  vars["XCODE"] = xcode;
  ve.reset_locals();
  std::string wcode;
  vars["WV"] = ve.value(conv.input(1), coords(two_d, {"dc_oc", "0", "dc_kh", "dc_kw"}), wcode);
  vars["WCODE"] = wcode;
  ve.reset_locals();
  std::string epi;
  const std::vector<std::string> yc = coords(two_d, {"dc_img", "dc_oc", "dc_oh", "dc_ow"});
  std::string hval = "dc_acc[dc_p]";
  if (conv.has_input(2)) hval += " + " + ve.value_dedented(conv.input(2), {"dc_oc"}, epi);
  // The Conv's output as stored: rounded once to its dtype (fp32 math, any storage).
  const std::string y = conv.outputs.at(0);
  epi += fmt::format("const float dc_h = {};\n", round_to_storage(g.info(y).dtype, hval));
  ve.bind(y, "dc_h");
  for (const auto& o : g.outputs) {
    const std::string val = ve.value_dedented(o, yc, epi);
    epi += fmt::format("{}[{}] = {};\n", ve.param_name(o), ve.offset(o, yc), store_value(g.info(o).dtype, val));
  }
  vars["EPILOGUE"] = epi;
}

// The per-thread inner loop: pixels_per_thread outputs of one channel from the staged tile
// (the input row segment under the kernel kept in registers across the kernel's width).
constexpr const char* kInnerLoop = R"(
// The per-thread inner loop: pixels_per_thread outputs of one channel from the staged tile
// (the input row segment under the kernel kept in registers across the kernel's width).
__device__ __forceinline__ void dc_depthwise_fp32(const float* DC_RESTRICT dc_xrow0,
                                                  const float* DC_RESTRICT dc_wch,
                                                  float (&dc_acc)[$(PPT)]) {
  DC_UNROLL
  for (int dc_kh = 0; dc_kh < $(KH); ++dc_kh) {
    const float* dc_xrow = dc_xrow0 + dc_kh * $(DH) * $(IN_TW);
    float dc_seg[$(SPAN)];
    DC_UNROLL
    for (int dc_s = 0; dc_s < $(SPAN); ++dc_s) dc_seg[dc_s] = dc_xrow[dc_s];
    DC_UNROLL
    for (int dc_kw = 0; dc_kw < $(KW); ++dc_kw) {
      const float dc_wv = dc_wch[dc_kh * $(KW) + dc_kw];
      DC_UNROLL
      for (int dc_p = 0; dc_p < $(PPT); ++dc_p)
        dc_acc[dc_p] = fmaf(dc_seg[dc_p * $(SW) + dc_kw * $(DW)], dc_wv, dc_acc[dc_p]);
    }
  }
}

)";
// The kernel: stage the input tile and the weights, then each thread's pixels and epilogue.
constexpr const char* kKernel = R"(extern "C" __global__ void DC_LAUNCH_BOUNDS($(THREADS)) dc_depthwise($(PARAMS)) {
  DC_DYNAMIC_SMEM(float, dc_smem);
  // Shared memory: the input tile with its halo [IN_C][IN_TH][IN_TW], then the weights of
  // the block's channels [BC][KH * KW].
  float* dc_xs = dc_smem;
  float* dc_ws = dc_smem + $(X_SMEM);
  const int dc_tid = (int)threadIdx.x;
  const dc_i64 dc_oh0 = (dc_i64)(blockIdx.x / $(TILES_W)) * $(TH);
  const dc_i64 dc_ow0 = (dc_i64)(blockIdx.x % $(TILES_W)) * $(TW);
  const dc_i64 dc_c0 = (dc_i64)blockIdx.y * $(BC);
  const dc_i64 dc_img = blockIdx.z;
  const dc_i64 dc_ic0 = dc_c0 / $(MULT);
  for (int dc_i = dc_tid; dc_i < $(IN_C) * $(IN_TH) * $(IN_TW); dc_i += $(THREADS)) {
    const dc_i64 dc_ic = dc_ic0 + dc_i / ($(IN_TH) * $(IN_TW));
    const dc_i64 dc_ih = dc_oh0 * $(SH) - $(PH) + (dc_i / $(IN_TW)) % $(IN_TH);
    const dc_i64 dc_iw = dc_ow0 * $(SW) - $(PW) + dc_i % $(IN_TW);
    float dc_x = 0.f;
    if (dc_ic < $(C) && dc_ih >= 0 && dc_ih < $(IH) && dc_iw >= 0 && dc_iw < $(IW)) {
      $(XCODE)
      dc_x = $(XV);
    }
    dc_xs[dc_i] = dc_x;
  }
  for (int dc_i = dc_tid; dc_i < $(BC) * $(KH) * $(KW); dc_i += $(THREADS)) {
    const dc_i64 dc_oc = dc_c0 + dc_i / ($(KH) * $(KW));
    const int dc_kh = (dc_i / $(KW)) % $(KH), dc_kw = dc_i % $(KW);
    (void)dc_kh;
    float dc_w = 0.f;
    if (dc_oc < $(OC)) {
      $(WCODE)
      dc_w = $(WV);
    }
    dc_ws[dc_i] = dc_w;
  }
  __syncthreads();
  // Thread -> (channel, row, first of pixels_per_thread columns).
  const int dc_cl = dc_tid / ($(TH) * ($(TW) / $(PPT)));
  const int dc_r = (dc_tid / ($(TW) / $(PPT))) % $(TH);
  const int dc_q = (dc_tid % ($(TW) / $(PPT))) * $(PPT);
  const dc_i64 dc_oc = dc_c0 + dc_cl;
  const dc_i64 dc_oh = dc_oh0 + dc_r;
  float dc_acc[$(PPT)];
  DC_UNROLL
  for (int dc_p = 0; dc_p < $(PPT); ++dc_p) dc_acc[dc_p] = 0.f;
  if (dc_oc < $(OC)) {
    const int dc_ci = (int)(dc_oc / $(MULT) - dc_ic0);
    dc_depthwise_fp32(dc_xs + (dc_ci * $(IN_TH) + dc_r * $(SH)) * $(IN_TW) + dc_q * $(SW),
                      dc_ws + dc_cl * $(KH) * $(KW), dc_acc);
  }
  DC_UNROLL
  for (int dc_p = 0; dc_p < $(PPT); ++dc_p) {
    const dc_i64 dc_ow = dc_ow0 + dc_q + dc_p;
    if (dc_oc < $(OC) && dc_oh < $(OH) && dc_ow < $(OW)) {
      $(EPILOGUE)
    }
  }
}
DC_EXPORT_KERNEL(dc_depthwise)
)";

}  // namespace

GeneratedKernel generate_depthwise(const Workload& w, const Variant& v) {
  check_variant(v, "depthwise_direct", true);
  const Graph& g = w.graph;
  const Node& conv = single_main_node(w, "depthwise_direct", "Conv", [](const Node& n) { return n.op == "Conv"; });
  check_depthwise(g, conv);
  const DwLayout L = depthwise_layout(g, conv, v);
  TemplateVars vars = {
      {"TH", str(L.th)},           {"TW", str(L.tw)},         {"BC", str(L.bc)},
      {"PPT", str(L.ppt)},         {"THREADS", str(L.threads)}, {"IN_TH", str(L.in_th)},
      {"IN_TW", str(L.in_tw)},     {"IN_C", str(L.in_c)},     {"KH", str(L.KH)},
      {"KW", str(L.KW)},           {"SH", str(L.SH)},         {"SW", str(L.SW)},
      {"DH", str(L.DH)},           {"DW", str(L.DW)},         {"PH", str(L.PH)},
      {"PW", str(L.PW)},           {"IH", str(L.IH)},         {"IW", str(L.IW)},
      {"OH", str(L.OH)},           {"OW", str(L.OW)},         {"C", str(L.channels)},
      {"OC", str(L.out_channels)}, {"MULT", str(L.mult)},     {"SPAN", str(L.span)},
      {"TILES_W", str(L.tiles_w)}, {"PARAMS", kernel_params(w)},
      {"X_SMEM", str(L.in_c * L.in_th * L.in_tw)}};
  operand_vars(vars, g, conv, L.two_d);

  std::string src = source_header(w, v.template_name, v.key());
  src += fmt::format("// depthwise {}x{} conv, {} -> {} channels (multiplier {}), {}x{} -> {}x{}\n", L.KH, L.KW,
                     L.channels, L.out_channels, L.mult, L.IH, L.IW, L.OH, L.OW);
  src += expand_template(kInnerLoop, vars);
  src += expand_template(kKernel, vars);
  return one_launch_kernel(w, v, std::move(src), "dc_depthwise", {L.grid_x, L.grid_y, L.images}, L.threads,
                           (L.in_c * L.in_th * L.in_tw + L.bc * L.KH * L.KW) * 4);
}

}  // namespace dc
