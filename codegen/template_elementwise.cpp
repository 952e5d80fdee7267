// "elementwise": injective chains (elementwise math with broadcasting, Cast, Where, index
// maps) in one vectorised grid-stride kernel. A thread takes `elems_per_thread` chunks of
// `vec` adjacent output elements per step, the chunks of a block `threads` apart so that
// every load and store instruction of a warp is coalesced. Outputs of one shape share one
// loop (their common subexpressions computed once); outputs of another shape get a loop of
// their own in the same kernel. Inputs that every output element reads at its own
// position (vector_loadable_inputs) are loaded as float2/float4 (f16/bf16: 32-bit pairs,
// unpacked) and their lanes bound; the rest are read element by element through the
// ValueEmitter, which is always correct. f16/bf16 outputs are stored as packed pairs.
//
// "opaque_generic": the naive one-thread-per-element kernel of template_reference.cpp with
// the variant's block size.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "generate.h"
#include "ir/error.h"
#include "template_util.h"
#include "value_emitter.h"
#include "variant_params.h"

namespace dc {

// template_reference.cpp: the naive kernels of every node of `w`.
GeneratedKernel generate_naive(const Workload& w, const std::string& template_name,
                               const std::string& variant_key, int threads, int64_t vec);

namespace {

const char* kLane[] = {"x", "y", "z", "w"};

// The vector width of a loop over `shape`: the variant's where it divides the tensor's size.
int64_t loop_vec(const Shape& shape, int64_t vec) { return shape_numel(shape) % vec == 0 ? vec : 1; }

// One grid-stride loop computing `outs` (all of shape `shape`) in chunks of `vec`.
std::string emit_loop(const Graph& g, ValueEmitter& em, const std::vector<std::string>& outs,
                      const Shape& shape, int64_t vec, int64_t ept, int& counter) {
  const int64_t numel = shape_numel(shape);
  const int64_t inner = shape.empty() ? 1 : shape.back();
  vec = loop_vec(shape, vec);
  const int64_t chunks = numel / vec;
  // A chunk inside one row steps its lanes along the inner coordinate. Where rows are not a
  // multiple of vec (ResNet's 7x7 planes), a chunk may cross rows: each lane unravels its own
  // index, and only inputs of the output's own size (one element per output, in its order) are
  // loaded as vectors; the broadcast ones are read per lane.
  const bool within_rows = inner % vec == 0;
  std::set<std::string> vec_inputs =
      vec > 1 ? vector_loadable_inputs(g, outs, inner, true) : std::set<std::string>{};
  if (!within_rows)
    std::erase_if(vec_inputs, [&](const std::string& in) { return shape_numel(g.info(in).shape) != numel; });

  std::string body;
  const auto c = emit_unravel(shape, "i", "c", body);
  em.reset_locals();
  // Vector loads of the inputs read at the chunk's own position: float2/float4 for f32;
  // f16/bf16 as 32-bit pairs unpacked to float2 (one pair for vec 2, two for vec 4). Each
  // input's lane k is lane_of[in][k].
  std::map<std::string, std::vector<std::string>> lane_of;
  for (const auto& in : vec_inputs) {
    const std::string v = fmt::format("vin{}", counter++);
    const DType t = g.info(in).dtype;
    std::vector<std::string>& l = lane_of[in];
    if (t == DType::f32) {
      body += fmt::format("  const {0} {1} = *reinterpret_cast<const {0}*>({2} + {3});\n", float_vector_type(vec), v,
                          em.param_name(in), em.offset(in, c));
      for (int64_t k = 0; k < vec; ++k) l.push_back(fmt::format("{}.{}", v, kLane[k]));
      continue;
    }
    const char* unpack = t == DType::f16 ? "dc_unpack_f16x2" : "dc_unpack_bf16x2";
    body += fmt::format("  const unsigned* {}p = reinterpret_cast<const unsigned*>({} + {});\n", v,
                        em.param_name(in), em.offset(in, c));
    for (int64_t pair = 0; pair < vec / 2; ++pair) {
      body += fmt::format("  const float2 {0}_{1} = {2}({0}p[{1}]);\n", v, pair, unpack);
      l.push_back(fmt::format("{}_{}.x", v, pair));
      l.push_back(fmt::format("{}_{}.y", v, pair));
    }
  }
  std::vector<std::vector<std::string>> lanes(outs.size());
  for (int64_t k = 0; k < vec; ++k) {
    std::vector<std::string> lc = c;
    if (k > 0 && within_rows) lc.back() = fmt::format("({} + {})", c.back(), k);
    if (k > 0 && !within_rows) lc = emit_unravel(shape, fmt::format("(i + {})", k), fmt::format("c{}_", k), body);
    for (const auto& [in, l] : lane_of) em.bind(in, l[static_cast<size_t>(k)]);
    for (size_t o = 0; o < outs.size(); ++o) lanes[o].push_back(em.value(outs[o], lc, body));
  }
  for (const auto& [in, l] : lane_of) em.unbind(in);
  for (size_t o = 0; o < outs.size(); ++o)
    body += store_chunk(em.param_name(outs[o]), g.info(outs[o]).dtype, lanes[o]);
  std::string names;
  for (const auto& o : outs) names += " " + o;
  return fmt::format("  // outputs{} : {} in {} chunks of {}\n", names, shape_str(shape), chunks, vec) +
         grid_stride_chunks(chunks, ept, vec, body);
}

}  // namespace

GeneratedKernel generate_elementwise(const Workload& w, const Variant& v) {
  const OutputParams p = OutputParams::of(v);
  const int64_t threads = p.threads;
  if (v.template_name == "opaque_generic")
    return generate_naive(w, "opaque_generic", v.key(), static_cast<int>(threads), p.vec);
  check_variant(v, "elementwise");
  const Graph& g = w.graph;
  for (const auto& n : g.nodes)
    DC_INTERNAL_CHECK(ValueEmitter::supports(n), "elementwise template: op ", n.op,
                      " is not injective (workload ", w.signature, ")");
  const int64_t ept = p.elems_per_thread, vec = p.vec;
  DC_INTERNAL_CHECK(vec == 1 || vec == 2 || vec == 4, "elementwise: vec ", vec);
  DC_INTERNAL_CHECK(threads > 0 && ept > 0, "elementwise: threads ", threads, ", elems ", ept);

  // Outputs grouped by shape, in output order.
  std::vector<std::pair<Shape, std::vector<std::string>>> groups;
  for (const auto& o : g.outputs) {
    const Shape& s = g.info(o).shape;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& gr) { return gr.first == s; });
    if (it == groups.end()) groups.push_back({s, {o}});
    else it->second.push_back(o);
  }
  ValueEmitter em(g);
  std::string body;
  int counter = 0;
  int64_t most_chunks = 1;
  for (const auto& [shape, outs] : groups) {
    body += emit_loop(g, em, outs, shape, vec, ept, counter);
    most_chunks = std::max(most_chunks, shape_numel(shape) / loop_vec(shape, vec));
  }
  std::string source = source_header(w, v.template_name, v.key()) + kernel_definition(w, "elementwise", threads, body);
  return one_launch_kernel(w, v, std::move(source), "elementwise",
                           {grid_blocks(most_chunks, threads * ept), 1, 1}, threads);
}

}  // namespace dc
