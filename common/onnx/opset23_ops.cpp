#include "onnx/opset23_ops.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include "ir/error.h"
#include "onnx/opset_adapt.h"
#include "onnx/tensor_proto.h"

namespace dc {

namespace {

using onnx::AttributeProto;
using onnx::NodeProto;
using onnx::TensorProto;

bool is_expanded_op(const NodeProto& n) {
  const bool domain = n.domain().empty() || n.domain() == "ai.onnx" || n.domain() == kNewerOpsDomain;
  return domain && is_opset23_fused_op(n.op_type());
}

// Element type and dims (-1: unknown) of a tensor whose shape is known.
struct ValueType {
  int32_t elem = 0;
  std::vector<int64_t> dims;
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
};

std::map<std::string, ValueType> infer_types(const onnx::ModelProto& m) {
  onnx::ModelProto probe = m;
  try {
    onnx::shape_inference::InferShapes(probe);  // non-strict: stops at the unexpanded nodes
  } catch (const std::exception&) {
  }
  std::map<std::string, ValueType> out;
  auto add = [&](const onnx::ValueInfoProto& v) {
    if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return;
    ValueType t;
    t.elem = v.type().tensor_type().elem_type();
    for (const auto& d : v.type().tensor_type().shape().dim()) t.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    out[v.name()] = t;
  };
  for (const auto& v : probe.graph().input()) add(v);
  for (const auto& v : probe.graph().value_info()) add(v);
  for (const auto& v : probe.graph().output()) add(v);
  for (const auto& t : probe.graph().initializer())
    out[t.name()] = ValueType{t.data_type(), std::vector<int64_t>(t.dims().begin(), t.dims().end())};
  return out;
}

std::string label(const NodeProto& n) { return n.name().empty() ? n.output(0) : n.name(); }

// Writes one node's chain: nodes into `out`, constants into the graph's initializers.
class Chain {
 public:
  // `constants`: the initializers chains wrote so far, by content, shared by all chains, so
  // that equal constants (masks, scales, shapes) have one name and equal nodes reading them
  // are one node after simplification's CSE (each layer's padding mask is computed once).
  Chain(onnx::ModelProto& m, const NodeProto& n, const std::map<std::string, ValueType>& types,
        std::vector<NodeProto>& out, std::map<std::string, std::string>& constants,
        std::map<std::string, std::vector<std::string>>& memo)
      : m_(m), n_(n), types_(types), out_(out), constants_(constants), memo_(memo),
        prefix_(label(n) + "/dc_opset23_") {}

  void expand() {
    if (n_.op_type() == "RMSNormalization") rms_norm();
    else if (n_.op_type() == "RotaryEmbedding") rotary();
    else attention();
  }

 private:
  [[noreturn]] void refuse(const std::string& why) const {
    throw_user_error("node '", label(n_), "' (", n_.op_type(), ", opset 23): ", why,
                     ", which dc cannot express in the opset-17 form it imports");
  }
  bool has_input(int i) const { return n_.input_size() > i && !n_.input(i).empty(); }
  const ValueType& type_of(int i) const {
    const auto it = types_.find(n_.input(i));
    if (it == types_.end()) refuse(str_cat("input '", n_.input(i), "' has a shape ONNX's shape inference cannot give"));
    return it->second;
  }
  int64_t dim(const ValueType& t, int64_t axis, const char* what) const {
    const int64_t d = t.dims.at(static_cast<size_t>(axis));
    if (d < 0) refuse(str_cat("its ", what, " is not a static size"));
    return d;
  }
  const AttributeProto* attr(const std::string& name) const {
    for (const auto& a : n_.attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  int64_t int_attr(const std::string& name, int64_t dflt) const {
    const auto* a = attr(name);
    return a ? a->i() : dflt;
  }
  float float_attr(const std::string& name, float dflt) const {
    const auto* a = attr(name);
    return a ? a->f() : dflt;
  }

  std::string fresh(const std::string& what) { return str_cat(prefix_, what, "_", count_++); }

  // Chains share what they compute (`memo`: a node's content -> its outputs): each layer's
  // RoPE tables, mask and scale are computed once, as a decomposed export computes them.
  std::vector<std::string> emit(NodeProto n, int outputs = 1) {
    auto [it, fresh_node] = memo_.try_emplace(str_cat(n.SerializeAsString(), "#", outputs));
    if (!fresh_node) return it->second;
    n.set_name(fresh(n.op_type() + "_node"));
    for (int k = 0; k < outputs; ++k) it->second.push_back(*n.add_output() = fresh(n.op_type()));
    out_.push_back(std::move(n));
    return it->second;
  }
  static NodeProto make(const std::string& type, const std::vector<std::string>& inputs) {
    NodeProto n;
    n.set_op_type(type);
    for (const auto& i : inputs) n.add_input(i);
    return n;
  }
  std::string op(const std::string& type, const std::vector<std::string>& inputs) {
    return emit(make(type, inputs))[0];
  }
  static void set_int(NodeProto& n, const std::string& name, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INT);
    a->set_i(v);
  }
  static void set_ints(NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  std::string with_int(const std::string& type, const std::vector<std::string>& inputs, const std::string& name,
                       int64_t v) {
    NodeProto n = make(type, inputs);
    set_int(n, name, v);
    return emit(std::move(n))[0];
  }
  std::string cast(const std::string& x, int32_t to) { return with_int("Cast", {x}, "to", to); }
  std::string transpose(const std::string& x, const std::vector<int64_t>& perm) {
    NodeProto n = make("Transpose", {x});
    set_ints(n, "perm", perm);
    return emit(std::move(n))[0];
  }
  std::string concat(const std::vector<std::string>& xs) { return with_int("Concat", xs, "axis", -1); }
  std::pair<std::string, std::string> halves(const std::string& x) {
    NodeProto n = make("Split", {x});  // no sizes: two equal parts (opset 13..17)
    set_int(n, "axis", -1);
    const auto outs = emit(std::move(n), 2);
    return {outs[0], outs[1]};
  }

  std::string ints(const std::vector<int64_t>& v) {
    return initializer(Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v));
  }
  // A float constant in element type `elem` (a float32 initializer, cast where needed).
  std::string scalar(float v, int32_t elem) {
    const std::string c = initializer(Tensor::scalar<float>(v));
    return elem == TensorProto::FLOAT ? c : cast(c, elem);
  }
  std::string initializer(const Tensor& t) {
    TensorProto proto;
    tensor_to_proto(t, "", &proto);
    auto [it, fresh_content] = constants_.try_emplace(proto.SerializeAsString(), "");
    if (!fresh_content) return it->second;
    it->second = fresh("const");
    proto.set_name(it->second);
    *m_.mutable_graph()->add_initializer() = std::move(proto);
    return it->second;
  }
  // The expanded node's output 0 (an Identity, which simplification removes: the value may
  // be a shared one that another chain computed first).
  void finish(const std::string& value) {
    NodeProto n = make("Identity", {value});
    n.set_name(fresh("output_node"));
    n.add_output(n_.output(0));
    out_.push_back(std::move(n));
  }

  void rms_norm() {
    const ValueType& x = type_of(0);
    const int64_t rank = x.rank();
    int64_t axis = int_attr("axis", -1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) refuse(str_cat("axis ", int_attr("axis", -1), " out of range for rank ", rank));
    std::vector<int64_t> axes;
    for (int64_t a = axis; a < rank; ++a) axes.push_back(a);
    const auto stash = static_cast<int32_t>(int_attr("stash_type", TensorProto::FLOAT));
    const std::string xf = x.elem == stash ? n_.input(0) : cast(n_.input(0), stash);
    NodeProto mean_node = make("ReduceMean", {op("Pow", {xf, scalar(2.0F, stash)})});
    set_ints(mean_node, "axes", axes);
    set_int(mean_node, "keepdims", 1);
    const std::string mean = emit(std::move(mean_node))[0];
    const std::string r =
        op("Reciprocal", {op("Sqrt", {op("Add", {mean, scalar(float_attr("epsilon", 1e-5F), stash)})})});
    std::string normed = op("Mul", {xf, r});
    if (x.elem != stash) normed = cast(normed, x.elem);
    finish(op("Mul", {normed, n_.input(1)}));
  }

  void rotary() {
    const ValueType& x = type_of(0);
    if (x.rank() != 3 && x.rank() != 4) refuse(str_cat("an input of rank ", x.rank(), " (3 or 4)"));
    const int64_t heads = int_attr("num_heads", 0);
    const int64_t rotary_dim = int_attr("rotary_embedding_dim", 0);
    const bool interleaved = int_attr("interleaved", 0) != 0;
    // x4: [batch, seq, heads, head] for a 3-D input, [batch, heads, seq, head] for a 4-D one;
    // the tables [batch, seq, rotary/2] get a unit dim at the heads axis.
    std::string x4 = n_.input(0);
    int64_t head = -1;
    if (x.rank() == 3) {
      if (heads <= 0) refuse("a 3-D input without num_heads");
      x4 = op("Reshape", {x4, ints({0, 0, heads, -1})});
      if (x.dims[2] >= 0) head = x.dims[2] / heads;
    } else {
      head = x.dims[3];
    }
    const int64_t heads_axis = x.rank() == 3 ? 2 : 1;
    std::string cos = n_.input(1), sin = n_.input(2);
    if (has_input(3)) {
      cos = with_int("Gather", {cos, n_.input(3)}, "axis", 0);
      sin = with_int("Gather", {sin, n_.input(3)}, "axis", 0);
    }
    cos = op("Unsqueeze", {cos, ints({heads_axis})});
    sin = op("Unsqueeze", {sin, ints({heads_axis})});
    const bool partial = rotary_dim > 0 && rotary_dim != head;
    std::string rotated = x4, kept;
    if (partial) {
      const int64_t end = std::numeric_limits<int64_t>::max();
      rotated = op("Slice", {x4, ints({0}), ints({rotary_dim}), ints({-1})});
      kept = op("Slice", {x4, ints({rotary_dim}), ints({end}), ints({-1})});
    }
    std::string y;
    if (!interleaved) {
      const auto [x1, x2] = halves(rotated);
      const std::string rot = concat({op("Neg", {x2}), x1});
      y = op("Add", {op("Mul", {rotated, concat({cos, cos})}), op("Mul", {rot, concat({sin, sin})})});
    } else {
      const auto [x1, x2] = halves(op("Reshape", {rotated, ints({0, 0, 0, -1, 2})}));
      const std::string c = op("Unsqueeze", {cos, ints({-1})}), s = op("Unsqueeze", {sin, ints({-1})});
      const std::string real = op("Sub", {op("Mul", {c, x1}), op("Mul", {s, x2})});
      const std::string imag = op("Add", {op("Mul", {s, x1}), op("Mul", {c, x2})});
      y = op("Reshape", {concat({real, imag}), ints({0, 0, 0, -1})});
    }
    if (partial) y = concat({y, kept});
    if (x.rank() == 3) y = op("Reshape", {y, ints({0, 0, -1})});
    finish(y);
  }

  void attention() {
    if (has_input(4) || has_input(5)) refuse("a KV cache (past_key, past_value)");
    if (has_input(6)) refuse("nonpad_kv_seqlen");
    if (float_attr("softcap", 0.0F) != 0.0F) refuse("softcap");
    const ValueType &q = type_of(0), &k = type_of(1), &v = type_of(2);
    if (q.rank() != k.rank() || q.rank() != v.rank() || (q.rank() != 3 && q.rank() != 4))
      refuse("Q, K and V of ranks other than all 3 or all 4");
    // [batch, heads, seq, head] views of Q, K and V.
    std::string q4 = n_.input(0), k4 = n_.input(1), v4 = n_.input(2);
    int64_t q_heads, kv_heads, q_len, kv_len, head, v_head;
    const int64_t batch = dim(q, 0, "batch size");
    if (q.rank() == 3) {
      q_heads = int_attr("q_num_heads", 0);
      kv_heads = int_attr("kv_num_heads", 0);
      if (q_heads <= 0 || kv_heads <= 0) refuse("3-D inputs without q_num_heads and kv_num_heads");
      auto split_heads = [&](const std::string& t, int64_t h) {
        return transpose(op("Reshape", {t, ints({0, 0, h, -1})}), {0, 2, 1, 3});
      };
      q4 = split_heads(q4, q_heads);
      k4 = split_heads(k4, kv_heads);
      v4 = split_heads(v4, kv_heads);
      q_len = dim(q, 1, "query length");
      kv_len = dim(k, 1, "key length");
      head = dim(q, 2, "hidden size") / q_heads;
      v_head = dim(v, 2, "value hidden size") / kv_heads;
    } else {
      q_heads = dim(q, 1, "query heads");
      kv_heads = dim(k, 1, "key heads");
      q_len = dim(q, 2, "query length");
      kv_len = dim(k, 2, "key length");
      head = dim(q, 3, "head size");
      v_head = dim(v, 3, "value head size");
    }
    if (q_heads != kv_heads) {
      if (kv_heads <= 0 || q_heads % kv_heads != 0)
        refuse(str_cat(q_heads, " query heads over ", kv_heads, " key/value heads"));
      // Grouped-query attention: head h of Q reads K/V head h / rep, as HF's repeat_kv.
      const int64_t rep = q_heads / kv_heads;
      auto repeat = [&](const std::string& t, int64_t d) {
        const std::string u = op("Unsqueeze", {t, ints({2})});
        const std::string e = op("Expand", {u, ints({batch, kv_heads, rep, kv_len, d})});
        return op("Reshape", {e, ints({batch, q_heads, kv_len, d})});
      };
      k4 = repeat(k4, head);
      v4 = repeat(v4, v_head);
    }
    const auto* scale_attr = attr("scale");
    const float scale = scale_attr ? scale_attr->f() : 1.0F / std::sqrt(static_cast<float>(head));
    const std::string sq = scalar(std::sqrt(scale), q.elem);
    std::string s = op("MatMul", {op("Mul", {q4, sq}), op("Mul", {transpose(k4, {0, 1, 3, 2}), sq})});
    const float inf = std::numeric_limits<float>::infinity();
    if (int_attr("is_causal", 0) != 0) {  // upper-left aligned: query i sees keys j <= i
      std::vector<float> bias(static_cast<size_t>(q_len * kv_len));
      for (int64_t i = 0; i < q_len; ++i)
        for (int64_t j = 0; j < kv_len; ++j) bias[static_cast<size_t>(i * kv_len + j)] = j <= i ? 0.0F : -inf;
      std::string b = initializer(Tensor::from_vector<float>({q_len, kv_len}, bias));
      if (q.elem != TensorProto::FLOAT) b = cast(b, q.elem);
      s = op("Add", {s, b});
    }
    if (has_input(3)) {
      const ValueType& mask = type_of(3);
      if (mask.rank() > 0 && mask.dims.back() >= 0 && mask.dims.back() != kv_len)
        refuse(str_cat("a mask of ", mask.dims.back(), " keys for ", kv_len, " (padding it)"));
      const std::string additive = mask.elem == TensorProto::BOOL
                                       ? op("Where", {n_.input(3), scalar(0.0F, q.elem), scalar(-inf, q.elem)})
                                       : n_.input(3);
      s = op("Add", {s, additive});
    }
    const int64_t precision = int_attr("softmax_precision", q.elem);
    const bool recast = precision != q.elem;
    if (recast) s = cast(s, static_cast<int32_t>(precision));
    std::string p = with_int("Softmax", {s}, "axis", -1);
    if (recast) p = cast(p, q.elem);
    std::string y = op("MatMul", {p, v4});
    if (q.rank() == 3) y = op("Reshape", {transpose(y, {0, 2, 1, 3}), ints({0, 0, -1})});
    finish(y);
  }

  onnx::ModelProto& m_;
  const NodeProto& n_;
  const std::map<std::string, ValueType>& types_;
  std::vector<NodeProto>& out_;
  std::map<std::string, std::string>& constants_;
  std::map<std::string, std::vector<std::string>>& memo_;
  std::string prefix_;
  int count_ = 0;
};

// Outputs other than Y (the KV cache, the QK product) that anything reads.
void refuse_used_extra_outputs(const onnx::GraphProto& g) {
  std::set<std::string> used;
  for (const auto& n : g.node())
    for (const auto& i : n.input()) used.insert(i);
  for (const auto& o : g.output()) used.insert(o.name());
  for (const auto& n : g.node()) {
    if (!is_expanded_op(n)) continue;
    for (int k = 1; k < n.output_size(); ++k)
      DC_USER_CHECK(n.output(k).empty() || !used.count(n.output(k)), "node '", label(n), "' (", n.op_type(),
                    ", opset 23): its output ", k, " ('", n.output(k), "') is used; dc imports output 0 only");
  }
}

bool inputs_typed(const NodeProto& n, const std::map<std::string, ValueType>& types) {
  const int needed = n.op_type() == "Attention" ? 3 : 1;
  for (int i = 0; i < needed && i < n.input_size(); ++i)
    if (!types.count(n.input(i))) return false;
  return true;
}

}  // namespace

bool is_opset23_fused_op(const std::string& op_type) {
  return op_type == "RMSNormalization" || op_type == "RotaryEmbedding" || op_type == "Attention";
}

int expand_opset23_ops(onnx::ModelProto& m) {
  auto& g = *m.mutable_graph();
  refuse_used_extra_outputs(g);
  int expanded = 0;
  std::map<std::string, std::string> constants;
  std::map<std::string, std::vector<std::string>> memo;
  for (;;) {
    bool pending = false;
    for (const auto& n : g.node()) pending = pending || is_expanded_op(n);
    if (!pending) return expanded;
    // One round: every node whose inputs have known shapes. Its chain is plain opset 17, so
    // the next round's inference reaches the nodes after it.
    const auto types = infer_types(m);
    std::vector<NodeProto> out;
    const NodeProto* stuck = nullptr;
    int progressed = 0;
    for (const auto& n : g.node()) {
      if (!is_expanded_op(n)) {
        out.push_back(n);
      } else if (inputs_typed(n, types)) {
        Chain(m, n, types, out, constants, memo).expand();
        ++progressed;
      } else {
        if (!stuck) stuck = &n;
        out.push_back(n);
      }
    }
    if (progressed == 0)
      throw_user_error("node '", label(*stuck), "' (", stuck->op_type(), ", opset 23): its inputs have shapes ",
                       "ONNX's shape inference cannot give, which dc needs to express it in opset 17");
    g.clear_node();
    for (auto& n : out) *g.add_node() = std::move(n);
    expanded += progressed;
  }
}

}  // namespace dc
