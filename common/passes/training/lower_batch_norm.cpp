#include "passes/training/lower_batch_norm.h"

#include "ir/error.h"
#include "ir/shape.h"
#include "passes/match.h"

namespace dc {

namespace {

// Appends forward nodes named "<BatchNorm>/apply/<op>" (not "grad/...": they are the
// forward pass, which recompute and the plan's notes tell apart by that prefix).
class ApplyBuilder {
 public:
  ApplyBuilder(Graph& g, std::string prefix) : g_(g), prefix_(std::move(prefix)) {}

  std::string node(const std::string& op, std::vector<std::string> in, TensorInfo type, std::string out = "") {
    if (out.empty()) {
      out = match::unique_name(g_, prefix_ + op);
      g_.tensors[out] = std::move(type);
    }
    g_.nodes.push_back(Node{fresh_node(op), op, {}, std::move(in), {out}});
    return out;
  }
  std::string reshape(const std::string& x, const Shape& to) {
    const std::string shape = match::unique_name(g_, prefix_ + "shape");
    g_.initializers[shape] = Tensor::from_vector<int64_t>({static_cast<int64_t>(to.size())}, to);
    g_.tensors[shape] = TensorInfo{DType::i64, {static_cast<int64_t>(to.size())}};
    return node("Reshape", {x, shape}, TensorInfo{g_.info(x).dtype, to});
  }
  std::string binary(const std::string& op, const std::string& a, const std::string& b, const std::string& out = "") {
    return node(op, {a, b}, TensorInfo{g_.info(a).dtype, broadcast_shapes(g_.info(a).shape, g_.info(b).shape)}, out);
  }

 private:
  std::string fresh_node(const std::string& op) { return prefix_ + op + std::to_string(count_++); }
  Graph& g_;
  std::string prefix_;
  int count_ = 0;
};

// Every input that reads `from` reads `to` instead.
void rename_reads(Graph& g, const std::string& from, const std::string& to) {
  for (Node& n : g.nodes)
    for (auto& in : n.inputs)
      if (in == from) in = to;
}

}  // namespace

void lower_batch_norm_apply(Graph& g) {
  std::vector<Node> nodes = std::move(g.nodes);
  g.nodes.clear();
  std::vector<std::pair<std::string, std::string>> saved_means;  // saved mean -> the batch mean
  for (Node& n : nodes) {
    if (n.op != "dc.BatchNormTrain") {
      g.nodes.push_back(std::move(n));
      continue;
    }
    DC_INTERNAL_CHECK(n.inputs.size() == 7 && n.outputs.size() == 5, n.op, " '", n.name,
                      "' needs 7 inputs and 5 outputs");
    const std::string &x = n.inputs[0], &scale = n.inputs[1], &bias = n.inputs[2];
    const std::string &batch_mean = n.inputs[5], &y = n.outputs[0], &invstd = n.outputs[4];
    const Shape& xs = g.info(x).shape;
    Node stats{n.name, "dc.BatchNormStats", n.attrs, {n.inputs[3], n.inputs[4], batch_mean, n.inputs[6]},
               {n.outputs[1], n.outputs[2], invstd}};
    stats.attrs.set("count", shape_numel(xs) / xs.at(1));
    g.nodes.push_back(std::move(stats));
    saved_means.emplace_back(n.outputs[3], batch_mean);
    if (y.empty()) continue;
    Shape per_channel(xs.size() - 1, 1);  // [C, 1, ...]: broadcasts over [N, C, ...]
    per_channel[0] = xs[1];
    ApplyBuilder b(g, n.name + "/apply/");
    const auto channel = [&](const std::string& t) { return b.reshape(t, per_channel); };
    const std::string centred = b.binary("Sub", x, channel(batch_mean));
    const std::string normed = b.binary("Mul", centred, channel(invstd));
    b.binary("Add", b.binary("Mul", normed, channel(scale)), channel(bias), y);  // Y keeps its name
  }
  for (const auto& [saved, batch] : saved_means) {
    rename_reads(g, saved, batch);
    g.tensors.erase(saved);
  }
}

}  // namespace dc
