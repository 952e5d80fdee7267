#include "passes/training/add_loss.h"

#include "ir/error.h"

namespace dc {

namespace {

std::string fresh(const Graph& g, const std::string& base) {
  std::string name = base;
  for (int k = 1; g.tensors.count(name); ++k) name = base + "." + std::to_string(k);
  return name;
}

void add_labels_input(Graph& g, const std::string& name, TensorInfo type) {
  DC_USER_CHECK(!g.tensors.count(name), "--labels '", name, "' names a tensor the model already "
                "has; choose another name");
  g.inputs.push_back(name);
  g.tensors[name] = std::move(type);
}

std::string cross_entropy(Graph& g, const TrainingSpec& spec, const std::string& logits) {
  const TensorInfo& t = g.info(logits);
  DC_USER_CHECK(t.shape.size() >= 2 && t.shape.back() >= 2, "--loss cross_entropy needs the first "
                "output '", logits, "' to hold logits over a class axis (its last, of >= 2 "
                "classes, after a batch axis), but its shape is ", shape_str(t.shape));
  add_labels_input(g, spec.labels, TensorInfo{DType::i64, Shape(t.shape.begin(), t.shape.end() - 1)});
  Node n;
  n.op = "dc.SoftmaxCrossEntropy";
  n.name = kCrossEntropyPrefix;
  n.inputs = {logits, spec.labels};
  n.outputs = {fresh(g, "loss"), fresh(g, "loss/log_probs")};
  g.tensors[n.outputs[0]] = TensorInfo{t.dtype, {}};
  g.tensors[n.outputs[1]] = t;
  g.nodes.push_back(n);
  return n.outputs[0];
}

std::string mean_squared_error(Graph& g, const TrainingSpec& spec, const std::string& y) {
  const TensorInfo t = g.info(y);
  add_labels_input(g, spec.labels, t);
  auto add = [&](const std::string& op, std::vector<std::string> in, const std::string& out,
                 TensorInfo type, Attributes a = {}) {
    Node n;
    n.op = op;
    n.name = "loss/" + out;
    n.inputs = std::move(in);
    n.outputs = {fresh(g, out)};
    n.attrs = std::move(a);
    g.tensors[n.outputs[0]] = std::move(type);
    g.nodes.push_back(n);
    return n.outputs[0];
  };
  const std::string diff = add("Sub", {y, spec.labels}, "loss/diff", t);
  const std::string sq = add("Mul", {diff, diff}, "loss/squared", t);
  Attributes a;
  a.set("keepdims", int64_t{0});
  return add("ReduceMean", {sq}, "loss", TensorInfo{t.dtype, {}}, a);
}

}  // namespace

std::string add_loss(Graph& g, const TrainingSpec& spec) {
  DC_USER_CHECK(!g.outputs.empty(), "the model has no output to train on");
  const std::string& y = g.outputs[0];
  const TensorInfo& t = g.info(y);
  DC_USER_CHECK(is_float(t.dtype), "the first output '", y, "' has dtype ", dtype_name(t.dtype),
                "; a loss needs a float output");
  switch (spec.loss) {
    case LossKind::cross_entropy: return cross_entropy(g, spec, y);
    case LossKind::mse: return mean_squared_error(g, spec, y);
    case LossKind::none:
      DC_USER_CHECK(shape_numel(t.shape) == 1, "--loss none needs the first output '", y,
                    "' to be the scalar loss, but its shape is ", shape_str(t.shape));
      return y;
  }
  throw_internal_error("unknown loss kind");
}

}  // namespace dc
