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
#include "variant_params.h"

namespace dc {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

GeneratedKernel generate_depthwise(const Workload& w, const Variant& v) {
  check_variant(v, "depthwise_direct", true);
  const Graph& g = w.graph;
  const Node* conv =
      &single_main_node(w, "depthwise_direct", "Conv", [](const Node& n) { return n.op == "Conv"; });
  const Shape& xs = g.info(conv->input(0)).shape;
  const Shape& ws = g.info(conv->input(1)).shape;
  const std::string y = conv->outputs.at(0);
  const Shape& ys = g.info(y).shape;
  DC_INTERNAL_CHECK(xs.size() == 3 || xs.size() == 4, "depthwise_direct: ", xs.size() - 2,
                    "-D convolution (1-D and 2-D only)");
  for (const auto& t : conv->inputs)
    if (!t.empty())
      DC_INTERNAL_CHECK(g.info(t).dtype == DType::f32 || g.info(t).dtype == DType::f16 ||
                            g.info(t).dtype == DType::bf16,
                        "depthwise_direct: float operands only (f32, f16, bf16), not ",
                        dtype_name(g.info(t).dtype));
  for (const auto& o : g.outputs)
    DC_INTERNAL_CHECK(g.info(o).shape == ys, "depthwise_direct: output '", o,
                      "' is not elementwise with the Conv output");
  const bool two_d = xs.size() == 4;
  const ref::Window win = ref::make_window(*conv, {"Conv", false}, Shape(xs.begin() + 2, xs.end()),
                                           Shape(ws.begin() + 2, ws.end()));
  const int64_t images = xs[0], channels = xs[1], out_channels = ws[0];
  const int64_t groups = conv->attrs.get_int("group", 1);
  DC_INTERNAL_CHECK(groups == channels && ws[1] == 1, "depthwise_direct: ", channels,
                    " input channels in ", groups,
                    " groups; this template needs one input channel per group");
  const int64_t mult = out_channels / groups;  // output channels per input channel

  const DepthwiseParams p = DepthwiseParams::of(v);
  const int64_t th = p.tile_h, tw = p.tile_w, bc = p.block_c, ppt = p.pixels_per_thread;
  DC_INTERNAL_CHECK(th > 0 && tw > 0 && bc > 0 && ppt > 0 && tw % ppt == 0,
                    "depthwise_direct: bad parameters in ", v.key());
  const int64_t threads = th * tw * bc / ppt;
  DC_INTERNAL_CHECK(threads >= 1 && threads <= 1024 &&
                        (v.threads_per_block == 0 || v.threads_per_block == threads),
                    "depthwise_direct: ", threads, " threads for ", v.key());
  const int64_t IH = win.in[1], IW = win.in[2], OH = win.out[1], OW = win.out[2];
  const int64_t KH = win.kernel[1], KW = win.kernel[2];
  const int64_t SH = win.stride[1], SW = win.stride[2], DH = win.dilation[1], DW = win.dilation[2];
  const int64_t PH = win.pad_begin[1], PW = win.pad_begin[2];
  const int64_t in_th = (th - 1) * SH + (KH - 1) * DH + 1;
  const int64_t in_tw = (tw - 1) * SW + (KW - 1) * DW + 1;
  // Input channels a block of block_c output channels reads (the most over all blocks).
  int64_t in_c = 1;
  for (int64_t c0 = 0; c0 < out_channels; c0 += bc) {
    const int64_t last = std::min(out_channels, c0 + bc) - 1;
    in_c = std::max(in_c, last / mult - c0 / mult + 1);
  }
  const int64_t span = (ppt - 1) * SW + (KW - 1) * DW + 1;  // input columns under ppt pixels
  const int64_t tiles_w = ceil_div(OW, tw), tiles_h = ceil_div(OH, th);
  const int64_t grid_x = tiles_w * tiles_h, grid_y = ceil_div(out_channels, bc);
  DC_INTERNAL_CHECK(grid_y <= 65535 && images <= 65535, "depthwise_direct: grid ", grid_x, "x",
                    grid_y, "x", images, " exceeds CUDA's limits");

  ValueEmitter ve(g);
  // Staging of the input tile: zero in the padding.
  std::string xcode;
  std::vector<std::string> xc = two_d ? std::vector<std::string>{"dc_img", "dc_ic", "dc_ih", "dc_iw"}
                                      : std::vector<std::string>{"dc_img", "dc_ic", "dc_iw"};
  const std::string xv = ve.value(conv->input(0), xc, xcode);
  ve.reset_locals();
  std::string wcode;
  std::vector<std::string> wc = two_d ? std::vector<std::string>{"dc_oc", "0", "dc_kh", "dc_kw"}
                                      : std::vector<std::string>{"dc_oc", "0", "dc_kw"};
  const std::string wv = ve.value(conv->input(1), wc, wcode);
  ve.reset_locals();

  // Epilogue per output pixel.
  std::string epi;
  std::vector<std::string> yc = two_d ? std::vector<std::string>{"dc_img", "dc_oc", "dc_oh", "dc_ow"}
                                      : std::vector<std::string>{"dc_img", "dc_oc", "dc_ow"};
  std::string hval = "dc_acc[dc_p]";
  if (conv->has_input(2)) hval += " + " + ve.value_dedented(conv->input(2), {"dc_oc"}, epi);
  // The Conv's output as stored: rounded once to its dtype (fp32 math, any storage).
  epi += fmt::format("const float dc_h = {};\n", round_to_storage(g.info(y).dtype, hval));
  ve.bind(y, "dc_h");
  for (const auto& o : g.outputs) {
    const std::string val = ve.value_dedented(o, yc, epi);
    epi += fmt::format("{}[{}] = {};\n", ve.param_name(o), ve.offset(o, yc),
                       store_value(g.info(o).dtype, val));
  }
  ve.reset_locals();

  const TemplateVars vars = {
      {"TH", str(th)},           {"TW", str(tw)},         {"BC", str(bc)},
      {"PPT", str(ppt)},         {"THREADS", str(threads)}, {"IN_TH", str(in_th)},
      {"IN_TW", str(in_tw)},     {"IN_C", str(in_c)},     {"KH", str(KH)},
      {"KW", str(KW)},           {"SH", str(SH)},         {"SW", str(SW)},
      {"DH", str(DH)},           {"DW", str(DW)},         {"PH", str(PH)},
      {"PW", str(PW)},           {"IH", str(IH)},         {"IW", str(IW)},
      {"OH", str(OH)},           {"OW", str(OW)},         {"C", str(channels)},
      {"OC", str(out_channels)}, {"MULT", str(mult)},     {"SPAN", str(span)},
      {"TILES_W", str(tiles_w)}, {"XCODE", xcode},        {"XV", xv},
      {"WCODE", wcode},          {"WV", wv},              {"EPILOGUE", epi},
      {"PARAMS", kernel_params(w)},
      {"X_SMEM", str(in_c * in_th * in_tw)}};

  std::string src = source_header(w, v.template_name, v.key());
  src += fmt::format("// depthwise {}x{} conv, {} -> {} channels (multiplier {}), {}x{} -> {}x{}\n",
                     KH, KW, channels, out_channels, mult, IH, IW, OH, OW);
  src += expand_template(R"(
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

extern "C" __global__ void DC_LAUNCH_BOUNDS($(THREADS)) dc_depthwise($(PARAMS)) {
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
)",
                vars);

  return one_launch_kernel(w, v, std::move(src), "dc_depthwise", {grid_x, grid_y, images}, threads,
                           (in_c * in_th * in_tw + bc * KH * KW) * 4);
}

}  // namespace dc
