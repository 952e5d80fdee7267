// "pool_window": MaxPool / AveragePool windows (1 to 3 spatial dims, NCHW-style layouts),
// one output element per thread, with the cluster's elementwise prologue (Relu before
// MaxPool) read tap by tap through the ValueEmitter and its elementwise epilogue applied
// to the window's result. Geometry (pads, auto_pad, strides, dilations, ceil_mode) comes
// from the same make_window as the CPU reference, baked in as constants; taps are a fully
// constant loop nest that the compiler unrolls. Grid-stride over outputs: a thread takes
// `elems_per_thread` outputs per step, `threads` apart; `vec` adjacent outputs along the
// last dim per chunk (vector stores when the output rows allow it). Any float storage
// (f32, f16, bf16): taps are read as float, the window computed in float, the pool's result
// rounded to its dtype before the epilogue reads it.
#include <cmath>

#include <fmt/format.h>

#include "generate.h"
#include "ir/error.h"
#include "ir/join.h"
#include "ref/im2col.h"
#include "template_util.h"
#include "value_emitter.h"
#include "variant_params.h"

namespace dc {

namespace {

// Statements computing the window result of pool node `p` for output coordinates `o`
// into a new float local, whose name is returned.
std::string emit_window(const Graph& g, const Node& p, ValueEmitter& em,
                        const std::vector<std::string>& o, const std::string& tag, std::string& code) {
  const bool is_max = p.op == "MaxPool";
  const std::string& x = p.input(0);
  const Shape& xs = g.info(x).shape;
  const int rank = static_cast<int>(xs.size()) - 2;
  const ref::Window w = ref::make_window(p, {p.op, true}, Shape(xs.begin() + 2, xs.end()),
                                         p.attrs.get_ints("kernel_shape"));
  const std::string acc = "acc" + tag, valid = "nvalid" + tag, padded = "npad" + tag;
  code += fmt::format("  float {} = {};\n  int {} = 0, {} = 0;\n", acc,
                      is_max ? float_literal(-INFINITY) : "0.f", valid, padded);
  std::vector<std::string> pos, inside, beyond;
  for (int d = 0; d < rank; ++d) {
    const int s = ref::Window::kMaxRank - rank + d;
    const std::string k = fmt::format("k{}{}", tag, d), q = fmt::format("p{}{}", tag, d);
    code += fmt::format("  for (int {0} = 0; {0} < {1}; ++{0}) {{\n", k, w.kernel[s]);
    code += fmt::format("  const dc_i64 {} = {};\n", q, tap_position(o[static_cast<size_t>(2 + d)], w.stride[s], w.pad_begin[s], k, w.dilation[s]));
    pos.push_back(q);
    inside.push_back(fmt::format("{0} >= 0 && {0} < {1}", q, w.in[s]));
    beyond.push_back(fmt::format("{} >= {}", q, w.in[s] + w.pad_end[s]));
  }
  // Taps past the end padding (ceil_mode) count nowhere, taps in the padding only for
  // count_include_pad: the CPU reference's rule.
  code += fmt::format("  if ({}) continue;\n  ++{};\n  if ({}) {{\n", join(beyond, " || "), padded,
                      join(inside, " && "));
  std::vector<std::string> xc = {o[0], o[1]};
  xc.insert(xc.end(), pos.begin(), pos.end());
  em.reset_locals();  // the prologue's locals live inside the tap loop
  std::string tap;
  const std::string v = em.value(x, xc, tap);
  em.reset_locals();
  code += tap + fmt::format("  ++{};\n", valid);
  if (is_max) code += fmt::format("  if (({1} > {0} || {1} != {1}) && {0} == {0}) {0} = {1};\n", acc, v);
  else code += fmt::format("  {} += {};\n", acc, v);
  for (int d = 0; d <= rank; ++d) code += "  }\n";
  if (!is_max) {
    const std::string count = p.attrs.get_int("count_include_pad", 0) == 1 ? padded : valid;
    code += fmt::format("  {0} = {1} > 0 ? {0} / (float){1} : 0.f;\n", acc, count);
  }
  return acc;
}

}  // namespace

GeneratedKernel generate_pool(const Workload& w, const Variant& v) {
  check_variant(v, "pool_window");
  const Graph& g = w.graph;
  const Node* pool = &single_main_node(w, "pool_window", "window pool", [](const Node& n) {
    return n.op == "MaxPool" || n.op == "AveragePool";
  });
  DC_INTERNAL_CHECK(pool->outputs.size() < 2 || pool->outputs[1].empty(),
                    "pool_window: MaxPool's Indices output is not supported");
  DC_INTERNAL_CHECK(pool->attrs.get_int("storage_order", 0) == 0,
                    "pool_window: storage_order 1 is not supported");
  const DType xt = g.info(pool->input(0)).dtype;
  DC_INTERNAL_CHECK(xt == DType::f32 || xt == DType::f16 || xt == DType::bf16,
                    "pool_window: input dtype ", dtype_name(xt));
  const int rank = static_cast<int>(g.info(pool->input(0)).shape.size()) - 2;
  DC_INTERNAL_CHECK(rank >= 1 && rank <= 3, "pool_window: spatial rank ", rank);
  const std::string& y = pool->outputs[0];
  const Shape& ys = g.info(y).shape;
  for (const auto& o : g.outputs)
    DC_INTERNAL_CHECK(g.info(o).shape == ys, "pool_window: output ", o, " of shape ",
                      shape_str(g.info(o).shape), " differs from the pool's ", shape_str(ys));

  const OutputParams p = OutputParams::of(v);
  const int64_t threads = p.threads, ept = p.elems_per_thread;
  int64_t vec = p.vec;
  if (ys.back() % vec != 0) vec = 1;
  const int64_t chunks = shape_numel(ys) / vec;

  ValueEmitter em(g);
  std::string body;
  const auto c = emit_unravel(ys, "i", "c", body);
  std::vector<std::vector<std::string>> lanes(g.outputs.size());
  for (int64_t k = 0; k < vec; ++k) {
    std::vector<std::string> lc = c;
    if (k > 0) lc.back() = fmt::format("({} + {})", c.back(), k);
    std::string r = emit_window(g, *pool, em, lc, std::to_string(k), body);
    if (g.info(y).dtype != DType::f32) {  // the pool's output as stored: rounded once
      body += fmt::format("  const float {0}r = {1};\n", r, round_to_storage(g.info(y).dtype, r));
      r += "r";
    }
    em.bind(y, r);  // the epilogue reads the window result at this element
    for (size_t o = 0; o < g.outputs.size(); ++o) lanes[o].push_back(em.value(g.outputs[o], lc, body));
    em.unbind(y);
  }
  for (size_t o = 0; o < g.outputs.size(); ++o)
    body += store_chunk(em.param_name(g.outputs[o]), g.info(g.outputs[o]).dtype, lanes[o]);

  std::string source = source_header(w, v.template_name, v.key()) +
                       kernel_definition(w, "pool_window", threads, grid_stride_chunks(chunks, ept, vec, body));
  return one_launch_kernel(w, v, std::move(source), "pool_window",
                           {grid_blocks(chunks, threads * ept), 1, 1}, threads);
}

}  // namespace dc
