#include "passes/fuse_pad_conv.h"

#include <optional>

#include "ir/error.h"
#include "passes/match.h"
#include "ref/resample.h"

namespace dc {

namespace {

// The Pad's per-axis pads when it is zero constant padding of the spatial axes (dims 2..)
// with constant parameters; nullopt otherwise.
std::optional<ref::PadSpec> zero_spatial_pad(const Graph& g, const Node& pad) {
  std::vector<Tensor> params(pad.inputs.size());
  for (size_t i = 1; i < pad.inputs.size(); ++i) {
    if (!pad.has_input(i)) continue;
    auto it = g.initializers.find(pad.input(i));
    if (it == g.initializers.end()) return std::nullopt;
    params[i] = it->second;
  }
  ref::PadSpec p;
  try {
    p = ref::pad_spec(pad, g.info(pad.input(0)).shape, params);
  } catch (const UserError&) {
    return std::nullopt;  // malformed: left for the reference kernel to report
  }
  if (p.mode != ref::PadMode::constant || p.value != 0) return std::nullopt;
  for (size_t d = 0; d < p.begin.size(); ++d) {
    if (p.begin[d] < 0 || p.end[d] < 0) return std::nullopt;
    if (d < 2 && (p.begin[d] != 0 || p.end[d] != 0)) return std::nullopt;
  }
  return p;
}

}  // namespace

Graph fuse_pad_conv(Graph g) {
  const match::Uses uses(g);
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs) producer[o] = i;
  for (Node& conv : g.nodes) {
    if (conv.op != "Conv" || !conv.has_input(0)) continue;
    const std::string auto_pad = conv.attrs.get_string("auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID") continue;
    auto p = producer.find(conv.input(0));
    if (p == producer.end()) continue;
    const Node& pad = g.nodes[p->second];
    if (pad.op != "Pad" || !g.tensors.count(pad.input(0))) continue;
    if (uses.sole_consumer(conv.input(0)) != std::optional<size_t>(&conv - g.nodes.data()))
      continue;
    const auto spec = zero_spatial_pad(g, pad);
    if (!spec) continue;
    const size_t r = spec->begin.size() - 2;  // spatial rank
    std::vector<int64_t> pads(2 * r, 0);
    if (auto_pad == "NOTSET") pads = conv.attrs.get_ints("pads", pads);
    if (pads.size() != 2 * r) continue;  // malformed: the Conv's check reports it
    for (size_t i = 0; i < r; ++i) {
      pads[i] += spec->begin[2 + i];
      pads[i + r] += spec->end[2 + i];
    }
    conv.inputs[0] = pad.input(0);
    conv.attrs.set("pads", pads);
    conv.attrs.set("auto_pad", std::string("NOTSET"));
  }
  return g;
}

}  // namespace dc
