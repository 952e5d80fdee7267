#include "onnx/opset_adapt.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>

#include "ir/error.h"
#include "onnx/opset23_ops.h"
#include "onnx/tensor_proto.h"

namespace dc {

namespace {

using onnx::AttributeProto;
using onnx::NodeProto;

bool default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

onnx::OperatorSetIdProto* default_opset_entry(onnx::ModelProto& m) {
  for (auto& o : *m.mutable_opset_import())
    if (default_domain(o.domain())) return &o;
  return nullptr;
}

std::string label(const NodeProto& n, int i) {
  return n.name().empty() ? str_cat(n.op_type(), " #", i) : n.name();
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// Shapes (-1 for an unknown dim) of every tensor whose shape the model states.
std::map<std::string, std::vector<int64_t>> known_dims(const onnx::ModelProto& m) {
  std::map<std::string, std::vector<int64_t>> dims;
  auto add = [&](const onnx::ValueInfoProto& v) {
    if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return;
    std::vector<int64_t> d;
    for (const auto& x : v.type().tensor_type().shape().dim()) d.push_back(x.has_dim_value() ? x.dim_value() : -1);
    dims[v.name()] = d;
  };
  for (const auto& v : m.graph().input()) add(v);
  for (const auto& v : m.graph().value_info()) add(v);
  for (const auto& v : m.graph().output()) add(v);
  for (const auto& t : m.graph().initializer()) dims[t.name()] = std::vector<int64_t>(t.dims().begin(), t.dims().end());
  return dims;
}

// Before opset 7, `broadcast=1, axis=k` aligned B with A's dims from k on (the old zoo's
// per-channel bias: A 1xCxHxW, B C, axis 1). ONNX 1.12's converter unsqueezes B wrongly
// there, so give B its trailing ones first (an Unsqueeze), which numpy broadcasting then
// aligns the same way, and drop `axis`.
void fix_legacy_axis_broadcast(onnx::ModelProto& m) {
  const auto dims = known_dims(m);
  auto& g = *m.mutable_graph();
  std::vector<onnx::NodeProto> out;
  int fresh = 0;
  for (int i = 0; i < g.node_size(); ++i) {
    onnx::NodeProto n = g.node(i);
    const AttributeProto* axis = nullptr;
    for (const auto& a : n.attribute())
      if (a.name() == "axis") axis = &a;
    static const std::set<std::string> binary = {"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor",
                                                 "Equal", "Greater", "Less"};
    if (!binary.count(n.op_type()) || axis == nullptr || n.input_size() != 2) {
      out.push_back(std::move(n));
      continue;
    }
    const auto a = dims.find(n.input(0)), b = dims.find(n.input(1));
    DC_USER_CHECK(a != dims.end() && b != dims.end(), "node '", label(n, i), "' (", n.op_type(),
                  ", legacy broadcast with axis): the shapes of its inputs are unknown");
    const int64_t ra = static_cast<int64_t>(a->second.size()), rb = static_cast<int64_t>(b->second.size());
    int64_t k = axis->i();
    if (k < 0) k += ra;
    DC_USER_CHECK(k >= 0 && k + rb <= ra, "node '", label(n, i), "' (", n.op_type(), "): broadcast axis ",
                  axis->i(), " does not fit B of rank ", rb, " in A of rank ", ra);
    if (k + rb < ra) {
      onnx::NodeProto u;
      u.set_op_type("Unsqueeze");
      u.set_name(str_cat(label(n, i), "_legacy_broadcast"));
      u.add_input(n.input(1));
      const std::string name = str_cat(n.input(1), "_dc_bcast", fresh++);
      u.add_output(name);
      auto* axes = u.add_attribute();
      axes->set_name("axes");
      axes->set_type(AttributeProto::INTS);
      for (int64_t d = rb; d < ra - k; ++d) axes->add_ints(d);
      n.set_input(1, name);
      out.push_back(std::move(u));
    }
    auto* as = n.mutable_attribute();
    as->erase(std::remove_if(as->begin(), as->end(), [](const AttributeProto& x) { return x.name() == "axis"; }),
              as->end());
    out.push_back(std::move(n));
  }
  g.clear_node();
  for (auto& n : out) *g.add_node() = std::move(n);
}

// --- opsets 1..5: ONNX's version converter ---

onnx::ModelProto convert_old(const onnx::ModelProto& m, int64_t from) {
  onnx::ModelProto at6;
  try {
    at6 = onnx::version_conversion::ConvertVersion(m, 6);
  } catch (const std::exception& e) {
    throw_user_error("the model uses opset ", from, "; ONNX's version converter cannot carry it to "
                     "opset 6: ", one_line(e.what()));
  }
  // Opset 7's broadcasting adapters need the shapes the opset-1 graph could not give.
  auto infer = [](onnx::ModelProto& model) {
    try {
      onnx::shape_inference::InferShapes(model);
    } catch (const std::exception&) {
    }
  };
  infer(at6);
  fix_legacy_axis_broadcast(at6);
  infer(at6);
  try {
    onnx::ModelProto at11 = onnx::version_conversion::ConvertVersion(at6, 11);
    // Reshape's 4->5 adapter writes its shape Constant without dims (a "scalar" of N values).
    for (auto& n : *at11.mutable_graph()->mutable_node()) {
      if (n.op_type() != "Constant") continue;
      for (auto& a : *n.mutable_attribute()) {
        auto& t = *a.mutable_t();
        if (a.name() != "value" || t.dims_size() != 0 || t.data_type() != onnx::TensorProto::INT64) continue;
        const int64_t count = t.has_raw_data() ? static_cast<int64_t>(t.raw_data().size() / 8) : t.int64_data_size();
        if (count != 1) t.add_dims(count);
      }
    }
    return at11;
  } catch (const std::exception& e) {
    throw_user_error("the model uses opset ", from, "; ONNX's version converter cannot carry it from "
                     "opset 6 to opset 11: ", one_line(e.what()));
  }
}

// --- opsets 18..21: the opset-17 form of the ops whose meaning changed ---

class Lowering {
 public:
  Lowering(onnx::ModelProto& m, int64_t from) : m_(m), from_(from) {}

  void run() {
    auto& g = *m_.mutable_graph();
    index_constants();
    for (int i = 0; i < g.node_size(); ++i) lower(*g.mutable_node(i), i);
    if (!need_shapes_.empty()) lower_with_shapes();
    bool private_domain = false;
    for (int i = 0; i < g.node_size(); ++i) {
      auto& n = *g.mutable_node(i);
      if (!default_domain(n.domain())) continue;
      if (!private_.count(i) && onnx::OpSchemaRegistry::Schema(n.op_type(), kOnnxLibMaxOpset, "") != nullptr)
        continue;
      n.set_domain(kNewerOpsDomain);  // Gelu, Mish, GroupNormalization: dc's shapes cover them
      private_domain = true;
    }
    default_opset_entry(m_)->set_version(kOnnxLibMaxOpset);
    if (private_domain) {
      auto* o = m_.add_opset_import();
      o->set_domain(kNewerOpsDomain);
      o->set_version(1);
    }
  }

 private:
  void index_constants() {
    for (const auto& t : m_.graph().initializer()) consts_[t.name()] = &t;
    for (const auto& n : m_.graph().node())
      if (n.op_type() == "Constant" && n.output_size() == 1)
        for (const auto& a : n.attribute())
          if (a.name() == "value" && a.has_t()) consts_[n.output(0)] = &a.t();
  }

  const AttributeProto* attr(const NodeProto& n, const std::string& name) {
    for (const auto& a : n.attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  void drop_attr(NodeProto& n, const std::string& name) {
    auto* as = n.mutable_attribute();
    as->erase(std::remove_if(as->begin(), as->end(), [&](const AttributeProto& a) { return a.name() == name; }),
              as->end());
  }
  void set_ints(NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
    drop_attr(n, name);
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  bool has_input(const NodeProto& n, int pos) { return n.input_size() > pos && !n.input(pos).empty(); }
  void drop_input(NodeProto& n, int pos) {
    if (n.input_size() <= pos) return;
    n.mutable_input(pos)->clear();
    while (n.input_size() > 0 && n.input(n.input_size() - 1).empty()) n.mutable_input()->RemoveLast();
  }
  std::vector<int64_t> const_ints(const NodeProto& n, int pos, int i, const char* what) {
    auto it = consts_.find(n.input(pos));
    DC_USER_CHECK(it != consts_.end(), "node '", label(n, i), "' (", n.op_type(), ", opset ", from_, "): ",
                  what, " '", n.input(pos), "' must be a constant to be expressed at opset ", kOnnxLibMaxOpset);
    return tensor_from_proto(*it->second, "").to_int64_vector();
  }
  [[noreturn]] void refuse(const NodeProto& n, int i, const std::string& why) {
    throw_user_error("node '", label(n, i), "' (", n.op_type(), ", opset ", from_, "): ", why,
                     ", which has no opset-", kOnnxLibMaxOpset, " form dc can import");
  }
  std::string str_attr(const NodeProto& n, const std::string& name, const std::string& dflt) {
    const auto* a = attr(n, name);
    return a ? a->s() : dflt;
  }
  int64_t int_attr(const NodeProto& n, const std::string& name, int64_t dflt) {
    const auto* a = attr(n, name);
    return a ? a->i() : dflt;
  }

  void lower(NodeProto& n, int i) {
    if (!default_domain(n.domain())) return;
    static const std::set<std::string> reduce18 = {"ReduceMax", "ReduceMin", "ReduceMean", "ReduceProd",
                                                   "ReduceL1", "ReduceL2", "ReduceLogSum",
                                                   "ReduceLogSumExp", "ReduceSumSquare"};
    const std::string& op = n.op_type();
    if (reduce18.count(op)) {
      const bool noop = int_attr(n, "noop_with_empty_axes", 0) != 0;
      drop_attr(n, "noop_with_empty_axes");
      if (!has_input(n, 1)) {
        if (noop) {  // no axes and noop: the identity
          n.set_op_type("Identity");
          n.clear_attribute();
        }
        return;
      }
      const auto axes = const_ints(n, 1, i, "the axes input");
      drop_input(n, 1);
      if (!axes.empty()) set_ints(n, "axes", axes);
      else if (noop) {
        n.set_op_type("Identity");
        n.clear_attribute();
      }
    } else if (op == "Split") {
      if (attr(n, "num_outputs") == nullptr) return;
      drop_attr(n, "num_outputs");
      if (!has_input(n, 1)) need_shapes_.push_back(i);  // sizes once the input's shape is known
    } else if (op == "Pad") {
      if (has_input(n, 3)) need_shapes_.push_back(i);
    } else if (op == "Resize") {
      // Their opset-17 values mean what opset 17 does; anything else (antialias, axes, a
      // kept aspect ratio) is for dc's Resize to take or refuse, past ONNX 1.12's checker.
      if (int_attr(n, "antialias", 0) == 0) drop_attr(n, "antialias");
      if (str_attr(n, "keep_aspect_ratio_policy", "stretch") == "stretch") drop_attr(n, "keep_aspect_ratio_policy");
      if (attr(n, "antialias") || attr(n, "keep_aspect_ratio_policy") || attr(n, "axes")) private_.insert(i);
    } else if (op == "AveragePool" || op == "LpPool") {
      if (const auto* d = attr(n, "dilations")) {
        if (std::any_of(d->ints().begin(), d->ints().end(), [](int64_t v) { return v != 1; }))
          refuse(n, i, "dilations other than 1 (opset 19)");
        drop_attr(n, "dilations");
      }
    } else if (op == "Cast" || op == "CastLike") {
      drop_attr(n, "saturate");  // float8 only, which dc does not have
    }
  }

  // Split num_outputs and Pad axes need the input's rank or dims: one shape
  // inference of the model as lowered so far (non-strict: the pending nodes may still be
  // incomplete), then the pending nodes.
  void lower_with_shapes() {
    onnx::ModelProto probe = m_;
    default_opset_entry(probe)->set_version(kOnnxLibMaxOpset);
    try {
      onnx::shape_inference::InferShapes(probe);
    } catch (const std::exception&) {
    }
    const auto dims = known_dims(probe);

    auto& g = *m_.mutable_graph();
    for (int i : need_shapes_) {
      NodeProto& n = *g.mutable_node(i);
      auto it = dims.find(n.input(0));
      if (it == dims.end()) refuse(n, i, "an input whose shape ONNX's shape inference cannot give");
      const std::vector<int64_t>& d = it->second;
      const int64_t rank = static_cast<int64_t>(d.size());
      auto norm_axes = [&](std::vector<int64_t> axes) {
        for (auto& a : axes) {
          if (a < 0) a += rank;
          if (a < 0 || a >= rank) refuse(n, i, str_cat("axis out of range for rank ", rank));
        }
        return axes;
      };
      if (n.op_type() == "Split") {
        const int64_t axis = norm_axes({int_attr(n, "axis", 0)})[0];
        const int64_t parts = n.output_size(), len = d[static_cast<size_t>(axis)];
        if (len < 0) refuse(n, i, "num_outputs on a dimension of unknown size");
        if (len % parts == 0) continue;  // opset 17 splits evenly by the number of outputs
        const int64_t chunk = (len + parts - 1) / parts;  // opset 18: the last chunk is smaller
        std::vector<int64_t> sizes;
        for (int64_t k = 0; k < parts; ++k) sizes.push_back(std::max<int64_t>(0, std::min(chunk, len - k * chunk)));
        const std::string name = add_int64_initializer(str_cat(label(n, i), "_split_sizes"), sizes);
        while (n.input_size() < 2) n.add_input("");
        n.set_input(1, name);
      } else if (n.op_type() == "Pad") {
        const auto axes = norm_axes(const_ints(n, 3, i, "the axes input"));
        const auto pads = const_ints(n, 1, i, "the pads input");
        if (pads.size() != 2 * axes.size()) refuse(n, i, "pads of a length other than twice the axes");
        std::vector<int64_t> full(static_cast<size_t>(2 * rank), 0);
        for (size_t k = 0; k < axes.size(); ++k) {
          full[static_cast<size_t>(axes[k])] = pads[k];
          full[static_cast<size_t>(axes[k] + rank)] = pads[k + axes.size()];
        }
        n.set_input(1, add_int64_initializer(str_cat(label(n, i), "_pads"), full));
        drop_input(n, 3);
      }
    }
  }

  std::string add_int64_initializer(std::string name, const std::vector<int64_t>& v) {
    while (consts_.count(name)) name += "_";
    auto* t = m_.mutable_graph()->add_initializer();
    tensor_to_proto(Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v), name, t);
    consts_[name] = t;
    return name;
  }

  onnx::ModelProto& m_;
  int64_t from_;
  std::map<std::string, const onnx::TensorProto*> consts_;
  std::vector<int> need_shapes_;
  std::set<int> private_;  // nodes whose opset-18+ attributes only dc's op checks
};

}  // namespace

OpsetAdaptation adapt_opset(onnx::ModelProto& m) {
  OpsetAdaptation r;
  auto* entry = default_opset_entry(m);
  DC_INTERNAL_CHECK(entry != nullptr, "adapt_opset: no default-domain opset");
  r.source_opset = r.opset = entry->version();
  // IR versions 9 and 10 (opsets 19+) add only float8 and 4-bit types, which dc does not
  // import anyway (the dtype checks name them); ONNX 1.12's checker stops at IR 8.
  if (m.ir_version() > onnx::Version::IR_VERSION) m.set_ir_version(onnx::Version::IR_VERSION);
  if (r.source_opset < 6) {
    m = convert_old(m, r.source_opset);
    m.mutable_graph()->clear_value_info();  // stale across the conversion; import infers anew
    r.opset = default_opset_entry(m)->version();
    r.how = str_cat("converted from opset ", r.source_opset, " to opset ", r.opset, " by ONNX's version converter");
  } else if (r.source_opset > kOnnxLibMaxOpset) {
    Lowering(m, r.source_opset).run();
    const int fused = r.source_opset >= 23 ? expand_opset23_ops(m) : 0;
    r.opset = kOnnxLibMaxOpset;
    r.how = str_cat("opset ", r.source_opset, " expressed as opset ", kOnnxLibMaxOpset,
                    " (the newest ONNX 1.12 checks)",
                    fused ? str_cat("; ", fused, " Attention/RMSNormalization/RotaryEmbedding nodes as their node chains") : "");
  }
  return r;
}

}  // namespace dc
