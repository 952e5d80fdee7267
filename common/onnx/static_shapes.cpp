#include "onnx/static_shapes.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>
#include <spdlog/spdlog.h>

#include "ir/error.h"
#include "onnx/tensor_proto.h"
#include "ref/einsum.h"
#include "ref/executor.h"

namespace dc {

const std::map<std::string, std::vector<int>>& shape_operands() {
  static const std::map<std::string, std::vector<int>> table = {
      {"Reshape", {1}},   {"Expand", {1}},        {"Tile", {1}},       {"ConstantOfShape", {0}},
      {"Slice", {1, 2, 3, 4}}, {"Split", {1}},    {"Squeeze", {1}},    {"Unsqueeze", {1}},
      {"ReduceSum", {1}}, {"ReduceMean", {1}},    {"ReduceMax", {1}},  {"ReduceMin", {1}},
      {"ReduceProd", {1}}, {"ReduceL2", {1}},     {"Range", {0, 1, 2}}, {"Pad", {1, 3}},
      {"Resize", {1, 2, 3}}, {"Upsample", {1}},   {"TopK", {1}},       {"OneHot", {1}},
  };
  return table;
}

namespace {

// Ops of the shape subgraph: computed (on small tensors only) when all inputs are known.
// Nothing with a real FLOP cost (MatMul, Conv, Softmax, normalizations) is ever run here.
const std::set<std::string>& value_ops() {
  static const std::set<std::string> ops = {
      "Shape", "Size", "Constant", "ConstantOfShape", "Range", "Gather", "Concat", "Slice",
      "Split", "Squeeze", "Unsqueeze", "Reshape", "Flatten", "Transpose", "Identity", "Expand",
      "Tile", "Cast", "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Max", "Min", "Pow", "Sqrt",
      "Reciprocal", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Not", "And",
      "Or", "Xor", "Where", "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin"};
  return ops;
}

}  // namespace

std::optional<TensorInfo> static_tensor_info(const onnx::TypeProto& type) {
  if (!type.has_tensor_type()) return std::nullopt;
  const auto& tt = type.tensor_type();
  const auto dtype = dtype_from_onnx(tt.elem_type());
  if (!dtype || !tt.has_shape()) return std::nullopt;
  TensorInfo info{*dtype, {}};
  for (const auto& d : tt.shape().dim()) {
    if (!d.has_dim_value() || d.dim_value() < 0) return std::nullopt;
    info.shape.push_back(d.dim_value());
  }
  return info;
}

namespace {

onnx::TypeProto type_of(const TensorInfo& info) {
  onnx::TypeProto t;
  auto* tt = t.mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(info.dtype));  // DType codes are ONNX's
  auto* shape = tt->mutable_shape();
  for (int64_t d : info.shape) shape->add_dim()->set_dim_value(d);
  return t;
}

// Shape and Size read only their input's shape: answered from the TensorInfo.
Tensor shape_value(const Node& n, const TensorInfo& in) {
  if (n.op == "Size") return Tensor::scalar<int64_t>(shape_numel(in.shape));
  const auto rank = static_cast<int64_t>(in.shape.size());
  // Same clamping as the reference kernel (ops_shape.cpp, run_shape).
  auto clamp = [rank](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  const int64_t b = clamp(n.attrs.get_int("start", 0));
  const int64_t e = std::max(b, clamp(n.attrs.get_int("end", rank)));
  return Tensor::from_vector<int64_t>({e - b},
                                      std::vector<int64_t>(in.shape.begin() + b, in.shape.begin() + e));
}

class ShapeWalker {
 public:
  ShapeWalker(Graph& g, const onnx::GraphProto& proto) : g_(g) {
    for (const auto& np : proto.node())
      for (const auto& o : np.output())
        if (!o.empty()) proto_of_[o] = &np;
    for (const auto& [name, t] : g.initializers)
      if (t.numel() <= kMaxShapeValueElements) values_[name] = t;
    mark_shape_subgraph();
  }

  std::vector<std::string> run() {
    std::vector<std::string> unresolved;
    for (const Node& n : g_.nodes) {
      if (!all_outputs_known(n)) apply_onnx_shape_function(n);
      if ((n.op == "Einsum" || n.op == "OneHot" || n.op == "TopK") && !all_outputs_known(n)) own_shape(n);
      evaluate_if_shape_subgraph(n);
      for (const auto& o : n.outputs)
        if (!o.empty() && !g_.tensors.count(o)) unresolved.push_back(o);
    }
    return unresolved;
  }

 private:
  // The tensors whose values some shape operand depends on: from the shape operands back
  // through value ops (Shape and Size stop the walk: they read only a shape).
  void mark_shape_subgraph() {
    std::unordered_map<std::string, const Node*> producer;
    for (const Node& n : g_.nodes)
      for (const auto& o : n.outputs)
        if (!o.empty()) producer[o] = &n;
    std::vector<std::string> todo;
    for (const Node& n : g_.nodes) {
      auto it = shape_operands().find(n.op);
      if (it == shape_operands().end()) continue;
      for (int pos : it->second)
        if (n.has_input(static_cast<size_t>(pos))) todo.push_back(n.inputs[static_cast<size_t>(pos)]);
    }
    while (!todo.empty()) {
      const std::string t = std::move(todo.back());
      todo.pop_back();
      if (!needed_.insert(t).second) continue;
      auto p = producer.find(t);
      if (p == producer.end() || !value_ops().count(p->second->op)) continue;
      if (p->second->op == "Shape" || p->second->op == "Size") continue;
      for (const auto& in : p->second->inputs)
        if (!in.empty()) todo.push_back(in);
    }
  }

  bool all_outputs_known(const Node& n) const {
    return std::all_of(n.outputs.begin(), n.outputs.end(),
                       [&](const std::string& o) { return o.empty() || g_.tensors.count(o); });
  }

  const onnx::TypeProto* type_proto(const std::string& name) {
    auto it = types_.find(name);
    if (it != types_.end()) return &it->second;
    auto info = g_.tensors.find(name);
    if (info == g_.tensors.end()) return nullptr;
    return &types_.emplace(name, type_of(info->second)).first->second;
  }

  DType values_dtype(const std::string& name) const {
    auto v = values_.find(name);
    return v == values_.end() ? DType::undefined : v->second.dtype();
  }

  const onnx::TensorProto* data_proto(const std::string& name) {
    auto it = data_.find(name);
    if (it != data_.end()) return &it->second;
    auto v = values_.find(name);
    if (v == values_.end()) return nullptr;
    onnx::TensorProto p;
    tensor_to_proto(v->second, name, &p);
    return &data_.emplace(name, std::move(p)).first->second;
  }

  // The op's own ONNX shape function, on the input shapes and every input value known.
  void apply_onnx_shape_function(const Node& n) {
    auto np_it = n.outputs.empty() ? proto_of_.end() : proto_of_.find(n.outputs.front());
    if (np_it == proto_of_.end()) return;
    onnx::NodeProto np = *np_it->second;  // the context wants a mutable node
    // dc imports only the default domain, which ONNX's registry names "".
    const std::string domain = np.domain() == "ai.onnx" ? "" : np.domain();
    const auto* schema =
        onnx::OpSchemaRegistry::Schema(np.op_type(), static_cast<int>(g_.opset), domain);
    if (!schema || !schema->has_type_and_shape_inference_function()) return;
    std::unordered_map<std::string, onnx::TypeProto*> types;
    std::unordered_map<std::string, const onnx::TensorProto*> data;
    for (const auto& in : np.input()) {
      if (in.empty()) continue;
      if (const auto* t = type_proto(in)) types[in] = const_cast<onnx::TypeProto*>(t);
      // Values only where a shape can depend on them: a float weight's bytes never
      // decide a shape, and copying them into a TensorProto was the largest cost of this
      // walk on decoders of small width (docs/bench/scale.md).
      if (!needed_.count(in) && !is_integer(values_dtype(in))) continue;
      if (const auto* d = data_proto(in)) data[in] = d;
    }
    const std::unordered_map<std::string, const onnx::SparseTensorProto*> no_sparse;
    onnx::shape_inference::InferenceContextImpl ctx(np, types, data, no_sparse);
    try {
      schema->GetTypeAndShapeInferenceFunction()(ctx);
    } catch (const std::exception& e) {
      spdlog::debug("shape function of '{}' ({}) fails: {}", n.name, n.op, e.what());
      return;
    }
    for (int i = 0; i < np.output_size(); ++i) {
      const std::string& o = np.output(i);
      if (o.empty() || g_.tensors.count(o)) continue;
      if (const auto* t = ctx.getOutputType(i))
        if (auto info = static_tensor_info(*t)) g_.tensors[o] = *info;
    }
  }

  // ONNX 1.12's Einsum and OneHot shape functions give the rank only: Einsum's output has
  // the extents of its letters (ref/einsum.h), OneHot's the (constant) depth at the axis.
  // TopK's K and OneHot's depth that are not constants are refused here, clearly.
  void own_shape(const Node& n) {
    std::vector<Shape> shapes;
    for (const auto& in : n.inputs) {
      auto it = g_.tensors.find(in);
      if (it == g_.tensors.end()) return;
      shapes.push_back(it->second.shape);
    }
    Shape out;
    DType dtype = g_.tensors.at(n.inputs[0]).dtype;
    if (n.op == "Einsum") {
      const ref::EinsumEquation e = ref::parse_einsum(n, shapes);
      for (char c : e.output) out.push_back(e.extent.at(c));
    } else {
      // K and depth decide the output's shape: without their value there is no static shape.
      auto depth = n.inputs.size() < 2 ? values_.end() : values_.find(n.input(1));
      DC_USER_CHECK(depth != values_.end() && depth->second.numel() == 1, n.op, " node '", n.name, "': ",
                    n.op == "TopK" ? "K" : "depth", " must be a constant (dc compiles static shapes)");
      if (n.op == "TopK") return;  // K is known: ONNX's shape function failed for another reason
      if (n.inputs.size() != 3) return;
      out = shapes[0];
      const int64_t axis = normalize_axis(n.attrs.get_int("axis", -1), static_cast<int64_t>(out.size()) + 1, "OneHot axis");
      const Tensor& d = depth->second;
      const int64_t v = is_float(d.dtype()) ? static_cast<int64_t>(d.to_float_vector()[0]) : d.to_int64_vector()[0];
      out.insert(out.begin() + axis, v);
      dtype = g_.tensors.at(n.input(2)).dtype;
    }
    g_.tensors[n.outputs[0]] = TensorInfo{dtype, out};
  }

  // Computes the node's outputs when it belongs to the shape subgraph (an output feeds a
  // shape operand), its inputs are known small values (or, for Shape/Size, have a static
  // shape) and its outputs are small.
  void evaluate_if_shape_subgraph(const Node& n) {
    if (!value_ops().count(n.op) || n.outputs.empty()) return;
    if (std::none_of(n.outputs.begin(), n.outputs.end(),
                     [&](const std::string& o) { return needed_.count(o) != 0; }))
      return;  // not on a path into a shape operand
    for (const auto& o : n.outputs) {
      auto it = o.empty() ? g_.tensors.end() : g_.tensors.find(o);
      if (it == g_.tensors.end() || shape_numel(it->second.shape) > kMaxShapeValueElements)
        return;  // outputs of unknown size are never computed
    }
    if (n.op == "Shape" || n.op == "Size") {
      auto in = g_.tensors.find(n.input(0));
      if (in != g_.tensors.end()) values_[n.outputs[0]] = shape_value(n, in->second);
      return;
    }
    ref::Inputs inputs;
    for (const auto& in : n.inputs) {
      if (in.empty()) {
        inputs.emplace_back();
        continue;
      }
      auto v = values_.find(in);
      if (v == values_.end()) return;
      inputs.push_back(v->second);
    }
    std::vector<DType> out_dtypes;
    for (const auto& o : n.outputs) out_dtypes.push_back(g_.tensors.at(o).dtype);
    auto out = ref::run_node(n, inputs, out_dtypes);
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const TensorInfo& want = g_.tensors.at(n.outputs[k]);
      DC_INTERNAL_CHECK(out[k].shape() == want.shape, "node '", n.name, "' (", n.op,
                        "): its shape function gives ", shape_str(want.shape),
                        " but its kernel computes ", shape_str(out[k].shape()));
      values_[n.outputs[k]] = std::move(out[k]);
    }
  }

  Graph& g_;
  std::unordered_map<std::string, const onnx::NodeProto*> proto_of_;
  std::set<std::string> needed_;                               // the shape subgraph's tensors
  std::map<std::string, Tensor> values_;                       // small known values
  std::unordered_map<std::string, onnx::TypeProto> types_;     // stable addresses
  std::unordered_map<std::string, onnx::TensorProto> data_;
};

}  // namespace

std::vector<std::string> infer_static_shapes(Graph& g, const onnx::GraphProto& proto) {
  return ShapeWalker(g, proto).run();
}

}  // namespace dc
