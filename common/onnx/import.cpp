#include "onnx/import.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <spdlog/spdlog.h>

#include "ir/error.h"
#include "ir/file_bytes.h"
#include "ir/tensor_limit.h"
#include "onnx/opset23_ops.h"
#include "onnx/opset_adapt.h"
#include "onnx/static_shapes.h"
#include "onnx/tensor_proto.h"
#include "ref/executor.h"
#include "ref/kernel.h"

namespace dc {

namespace fs = std::filesystem;

namespace {

// Logs, at debug level, the time since the previous lap.
class PhaseClock {
 public:
  void lap(const char* phase) {
    const auto now = std::chrono::steady_clock::now();
    spdlog::debug("import {:<22} {:8.1f} ms", phase, std::chrono::duration<double, std::milli>(now - last_).count());
    last_ = now;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// One line: checker and shape-inference messages can span several lines.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

int64_t default_opset(const onnx::ModelProto& m) {
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
  return 0;
}

std::set<std::string> initializer_names(const onnx::GraphProto& g) {
  std::set<std::string> out;
  for (const auto& t : g.initializer()) out.insert(t.name());
  return out;
}

ModelInput describe_input(const onnx::ValueInfoProto& v) {
  ModelInput in;
  in.name = v.name();
  if (!v.type().has_tensor_type()) return in;
  const auto& tt = v.type().tensor_type();
  in.dtype = dtype_from_onnx(tt.elem_type()).value_or(DType::undefined);
  for (const auto& d : tt.shape().dim()) {
    in.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    in.dim_names.push_back(d.has_dim_param() ? d.dim_param() : "");
  }
  return in;
}

// --- validation steps, in the order import runs them ---

void check_opset(const onnx::ModelProto& m) {
  DC_USER_CHECK(m.has_graph(), "the file parses but holds no graph: not an ONNX model");
  const int64_t opset = default_opset(m);
  DC_USER_CHECK(opset > 0, "the model imports no default-domain (ai.onnx) opset");
  DC_USER_CHECK(opset <= kMaxOpset, "the model uses opset ", opset, ", newer than dc supports (",
                kMinOpset, "..", kMaxOpset, "); re-export it with opset ", kMaxOpset,
                " or lower");
  DC_USER_CHECK(opset >= kMinOpset, "the model uses opset ", opset, ", older than dc supports (",
                kMinOpset, "..", kMaxOpset, ")");
  if (opset < 11)
    spdlog::warn("opset {} is outside the tested range 11..{}; importing anyway", opset, kMaxOpset);
}

// One message listing every unsupported op type with its first node and count.
void check_supported_ops(const onnx::ModelProto& m) {
  const onnx::GraphProto& g = m.graph();
  const bool opset23 = default_opset(m) >= 23;  // its fused ops become node chains (adapt_opset)
  std::vector<std::string> order;
  std::map<std::string, std::pair<std::string, int>> bad;  // op -> (first node, count)
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    const bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    const std::string op = default_domain ? n.op_type() : str_cat(n.domain(), "::", n.op_type());
    if (default_domain && (ref::find_op(n.op_type()) || (opset23 && is_opset23_fused_op(n.op_type())))) continue;
    auto [it, fresh] = bad.try_emplace(op, n.name().empty() ? str_cat("#", i) : n.name(), 0);
    if (fresh) order.push_back(op);
    ++it->second.second;
  }
  if (bad.empty()) return;
  std::ostringstream msg;
  msg << "unsupported op" << (order.size() > 1 ? "s" : "") << ": ";
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& [first, count] = bad[order[i]];
    msg << (i ? ", " : "") << order[i] << " (" << count << " node" << (count > 1 ? "s" : "")
        << ", first '" << first << "')";
  }
  throw UserError(msg.str());
}

void apply_input_shapes(onnx::GraphProto& g, const std::map<std::string, Shape>& shapes) {
  const auto inits = initializer_names(g);
  // Not a structured binding: clang 14 (the fuzz build) cannot capture one in a lambda.
  for (const auto& entry : shapes) {
    const std::string& name = entry.first;
    const Shape& shape = entry.second;
    auto* v = [&]() -> onnx::ValueInfoProto* {
      for (auto& in : *g.mutable_input())
        if (in.name() == name && !inits.count(name)) return &in;
      return nullptr;
    }();
    DC_USER_CHECK(v != nullptr, "--shape names '", name, "', which is not an input of the model");
    auto* tt = v->mutable_type()->mutable_tensor_type();
    const int rank = tt->shape().dim_size();
    DC_USER_CHECK(rank == 0 || rank == static_cast<int>(shape.size()), "--shape ", name, "=",
                  shape_str(shape), " has rank ", shape.size(), " but the input has rank ", rank);
    tt->mutable_shape()->clear_dim();
    for (int64_t d : shape) {
      DC_USER_CHECK(d > 0, "--shape ", name, ": dimensions must be positive");
      tt->mutable_shape()->add_dim()->set_dim_value(d);
    }
  }
}

void bind_constants(onnx::GraphProto& g, const std::map<std::string, Tensor>& values) {
  for (const auto& entry : values) {
    const std::string& name = entry.first;
    const Tensor& value = entry.second;
    auto& inputs = *g.mutable_input();
    auto it = std::find_if(inputs.begin(), inputs.end(),
                           [&](const onnx::ValueInfoProto& v) { return v.name() == name; });
    DC_USER_CHECK(it != inputs.end(), "cannot bind '", name, "': not an input of the model");
    inputs.erase(it);
    tensor_to_proto(value, name, g.add_initializer());
  }
}

void check_static_inputs(const onnx::GraphProto& g) {
  const auto inits = initializer_names(g);
  std::vector<std::string> problems;
  std::string example;
  for (const auto& v : g.input()) {
    if (inits.count(v.name())) continue;
    DC_USER_CHECK(v.type().has_tensor_type(), "input '", v.name(), "' is not a tensor");
    const auto& tt = v.type().tensor_type();
    DC_USER_CHECK(dtype_from_onnx(tt.elem_type()).has_value(), "input '", v.name(),
                  "' has element type ", onnx_dtype_name(tt.elem_type()),
                  ", which dc does not support");
    DC_USER_CHECK(tt.has_shape(), "input '", v.name(),
                  "' has no shape; give a fixed one with --shape ", v.name(), "=DxDx...");
    std::vector<std::string> dyn;
    std::string fixed;
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const auto& d = tt.shape().dim(i);
      if (i) fixed += 'x';
      if (!d.has_dim_value() || d.dim_value() < 0) {
        dyn.push_back(d.has_dim_param() ? str_cat("dim ", i, " '", d.dim_param(), "'")
                                        : str_cat("dim ", i));
        fixed += '1';
      } else {
        fixed += std::to_string(d.dim_value());
      }
    }
    if (dyn.empty()) continue;
    std::string joined;
    for (const auto& s : dyn) joined += str_cat(joined.empty() ? "" : ", ", s);
    problems.push_back(str_cat("'", v.name(), "' (", joined, ")"));
    if (example.empty()) example = str_cat(v.name(), "=", fixed);
  }
  if (problems.empty()) return;
  std::string joined;
  for (const auto& s : problems) joined += str_cat(joined.empty() ? "" : ", ", s);
  throw_user_error("dynamic dimensions in input", problems.size() > 1 ? "s " : " ", joined,
                   ": dc compiles for static shapes; give a fixed shape, e.g. --shape ", example);
}

// ONNX requires topological order and its checker reports a cycle as an ordering problem;
// name the cycle instead, so that the user sees what is wrong.
void check_acyclic(const onnx::GraphProto& g) {
  std::map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& o : g.node(i).output())
      if (!o.empty()) producer[o] = i;
  auto label = [&](int i) {
    return g.node(i).name().empty() ? str_cat(g.node(i).op_type(), " #", i) : g.node(i).name();
  };
  std::vector<int> state(g.node_size(), 0);  // 0 new, 1 on the DFS stack, 2 done
  std::vector<int> stack;
  std::function<void(int)> visit = [&](int i) {
    state[i] = 1;
    stack.push_back(i);
    for (const auto& in : g.node(i).input()) {
      auto it = producer.find(in);
      if (it == producer.end()) continue;
      if (state[it->second] == 1) {
        std::string path;
        auto from = std::find(stack.begin(), stack.end(), it->second);
        for (auto s = from; s != stack.end(); ++s) path += label(*s) + " -> ";
        throw_user_error("the graph has a cycle: ", path, label(it->second));
      }
      if (state[it->second] == 0) visit(it->second);
    }
    stack.pop_back();
    state[i] = 2;
  };
  for (int i = 0; i < g.node_size(); ++i)
    if (state[i] == 0) visit(i);
}

// Every tensor a node reads, and every graph output, must be defined somewhere (ONNX's
// checker words the first as an ordering problem; ONNX's version converter, which opsets
// 1..5 go through before the checker runs, dereferences a null value for an output that
// nothing defines: a fuzz_onnx_import finding).
void check_inputs_defined(const onnx::GraphProto& g) {
  std::set<std::string> defined = initializer_names(g);
  for (const auto& v : g.input()) defined.insert(v.name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) defined.insert(o);
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& in : g.node(i).input())
      DC_USER_CHECK(in.empty() || defined.count(in), "node '",
                    g.node(i).name().empty() ? str_cat(g.node(i).op_type(), " #", i) : g.node(i).name(),
                    "' (", g.node(i).op_type(), ") reads tensor '", in,
                    "', which no node, graph input or initializer defines (a missing initializer?)");
  for (const auto& out : g.output())
    DC_USER_CHECK(defined.count(out.name()), "graph output '", out.name(),
                  "' is defined by no node, graph input or initializer");
}

// External-data initializers up to this size are read into the proto, so that ONNX's
// shape inference sees their values (shape operands are tiny); larger ones stay on disk.
constexpr size_t kInlineExternalBytes = size_t{64} << 10;

// Takes the large external-data initializers out of the proto (with dc's path and size
// checks, relative to the model's folder), as file-backed tensors that are read only when
// a value is needed, and declares each as a typed graph input instead, so that the checker
// and shape inference neither look for files relative to the cwd nor read the weights.
// Small ones are read into the proto. Initializers whose raw_data load_onnx left in the
// model file (`in_file`) become file-backed tensors of `model_path` the same way.
std::map<std::string, Tensor> detach_external_data(onnx::GraphProto& g, const std::string& model_dir,
                                                   const std::map<int, FileSlice>& in_file,
                                                   const std::string& model_path) {
  std::map<std::string, Tensor> on_disk;
  std::set<std::string> declared;
  for (const auto& v : g.input()) declared.insert(v.name());
  auto& inits = *g.mutable_initializer();
  int kept = 0;
  for (int i = 0; i < inits.size(); ++i) {
    onnx::TensorProto& t = inits[i];
    const auto slice = in_file.find(i);
    if (slice != in_file.end() || t.data_location() == onnx::TensorProto::EXTERNAL) {
      const std::string name = t.name();
      DC_USER_CHECK(!name.empty(), "the model has an initializer without a name");
      Tensor value = slice != in_file.end()
                         ? tensor_in_file(t, model_path, slice->second.offset, slice->second.bytes)
                         : tensor_from_proto(t, model_dir);
      if (value.nbytes() <= kInlineExternalBytes) {
        tensor_to_proto(value, name, &t);
      } else {
        if (declared.insert(name).second) {
          auto* in = g.add_input();
          in->set_name(name);
          auto* tt = in->mutable_type()->mutable_tensor_type();
          tt->set_elem_type(t.data_type());
          auto* shape = tt->mutable_shape();
          for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
        }
        on_disk.emplace(name, std::move(value));
        continue;
      }
    }
    if (kept != i) inits.SwapElements(kept, i);
    ++kept;
  }
  inits.DeleteSubrange(kept, inits.size() - kept);
  return on_disk;
}

void run_checker(const onnx::ModelProto& m) {
  try {
    onnx::checker::check_model(m);
  } catch (const std::exception& e) {
    throw_user_error("the ONNX checker rejects the model: ", one_line(e.what()));
  }
}

void run_shape_inference(onnx::ModelProto& m) {
  try {
    onnx::ShapeInferenceOptions opts(/*check_type=*/true, /*strict_mode=*/1, /*data_prop=*/true);
    onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(), opts);
  } catch (const std::exception& e) {
    throw_user_error("ONNX shape inference fails: ", one_line(e.what()));
  }
}

// --- conversion ---

AttrValue convert_attribute(const onnx::AttributeProto& a, const std::string& model_dir,
                            const std::string& node) {
  using A = onnx::AttributeProto;
  switch (a.type()) {
    case A::INT: return a.i();
    case A::FLOAT: return a.f();
    case A::STRING: return a.s();
    case A::INTS: return std::vector<int64_t>(a.ints().begin(), a.ints().end());
    case A::FLOATS: return std::vector<float>(a.floats().begin(), a.floats().end());
    case A::STRINGS: return std::vector<std::string>(a.strings().begin(), a.strings().end());
    case A::TENSOR: return tensor_from_proto(a.t(), model_dir);
    default:
      throw_user_error("node '", node, "': attribute '", a.name(), "' has type ",
                       A::AttributeType_Name(a.type()), ", which dc does not support");
  }
}

// Older opsets' semantics expressed on today's op, so kernels see one form.
void normalize_for_opset(Node& n, int64_t opset) {
  if ((n.op == "Softmax" || n.op == "LogSoftmax") && opset < 13) {
    n.attrs.set("axis", n.attrs.get_int("axis", 1));
    n.attrs.set("dc_legacy_flatten", int64_t{1});
  }
}

Graph convert(onnx::ModelProto& m, const std::string& model_dir, std::map<std::string, Tensor> on_disk) {
  auto& gp = *m.mutable_graph();
  Graph g;
  g.name = gp.name();
  g.opset = default_opset(m);
  for (auto& [name, value] : on_disk) {
    g.tensors[name] = {value.dtype(), value.shape()};
    g.initializers.emplace(name, std::move(value));
  }

  for (auto& t : *gp.mutable_initializer()) {
    DC_USER_CHECK(!t.name().empty(), "the model has an initializer without a name");
    Tensor value = tensor_from_proto(t, model_dir);
    g.tensors[t.name()] = {value.dtype(), value.shape()};
    g.initializers[t.name()] = std::move(value);
    t.clear_raw_data();  // the Tensor owns the bytes now; halve peak memory on big models
  }
  auto add_info = [&](const onnx::ValueInfoProto& v) {
    if (auto info = static_tensor_info(v.type())) g.tensors.try_emplace(v.name(), *info);
  };
  for (const auto& v : gp.input()) {
    if (g.initializers.count(v.name())) continue;
    g.inputs.push_back(v.name());
    add_info(v);
  }
  for (const auto& v : gp.output()) {
    g.outputs.push_back(v.name());
    add_info(v);
  }
  for (const auto& v : gp.value_info()) add_info(v);

  std::set<std::string> names;
  for (int i = 0; i < gp.node_size(); ++i) {
    const auto& np = gp.node(i);
    Node n;
    n.op = np.op_type();
    n.name = np.name().empty() ? str_cat(np.op_type(), "_", i) : np.name();
    while (!names.insert(n.name).second) n.name = str_cat(n.name, "_", i);
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    while (!n.inputs.empty() && n.inputs.back().empty()) n.inputs.pop_back();
    for (const auto& a : np.attribute()) n.attrs.set(a.name(), convert_attribute(a, model_dir, n.name));
    normalize_for_opset(n, g.opset);
    g.nodes.push_back(std::move(n));
  }
  return g;
}

constexpr int64_t kMaxFallbackTensorBytes = int64_t{256} << 20;

// ONNX's inference leaves some shapes open (value-dependent ops it cannot propagate). Fill
// them from the shape subgraph and the ops' shape functions (static_shapes.h), never by
// running the model; only data-dependent shapes left after that (none in dc's op set
// today, a safety net) fall back to the reference executor on placeholder inputs.
void complete_shapes(Graph& g, const onnx::GraphProto& proto) {
  if (std::all_of(g.nodes.begin(), g.nodes.end(), [&](const Node& n) {
        return std::all_of(n.outputs.begin(), n.outputs.end(),
                           [&](const std::string& o) { return o.empty() || g.tensors.count(o); });
      }))
    return;
  const auto missing = infer_static_shapes(g, proto);
  if (missing.empty()) return;
  spdlog::warn("{} tensor(s) have data-dependent shapes (first '{}'); computing them with the "
               "reference executor", missing.size(), missing.front());
  ref::TensorMap inputs;
  for (const auto& name : g.inputs) {
    const auto& info = g.info(name);
    inputs[name] = Tensor(info.dtype, info.shape);  // zeros: valid indices for Gather too
  }
  ref::RunOptions opts;
  opts.keep_intermediates = true;
  // The executor runs the whole model, whose sizes nothing has bounded here: a malformed
  // model must not make it allocate without end (a fuzz_onnx_import finding: a OneHot of
  // depth 10^9 asked for 67 GB). No tensor above kMaxFallbackTensorBytes.
  const TensorByteLimit limit(kMaxFallbackTensorBytes);
  const auto values = ref::run_graph(g, inputs, opts);
  for (const auto& name : missing) {
    auto it = values.find(name);
    DC_INTERNAL_CHECK(it != values.end(), "tensor '", name, "' not computed");
    g.tensors[name] = {it->second.dtype(), it->second.shape()};
  }
}

void check_nodes(const Graph& g) {
  for (const auto& n : g.nodes) {
    const ref::OpDef* def = ref::find_op(n.op);
    DC_INTERNAL_CHECK(def != nullptr, "unsupported op passed the import check");
    if (!def->check) continue;
    std::vector<const TensorInfo*> infos;
    for (const auto& in : n.inputs) {
      auto it = in.empty() ? g.tensors.end() : g.tensors.find(in);
      infos.push_back(it == g.tensors.end() ? nullptr : &it->second);
    }
    try {
      def->check(n, infos);
    } catch (const UserError& e) {
      throw UserError(str_cat("node '", n.name, "' (", n.op, "): ", e.what()));
    }
  }
}

}  // namespace

OnnxModel::OnnxModel(std::unique_ptr<onnx::ModelProto> proto, std::string path,
                     std::map<int, FileSlice> raw_data_in_file)
    : proto_(std::move(proto)), path_(std::move(path)), raw_data_in_file_(std::move(raw_data_in_file)) {}
OnnxModel::OnnxModel(OnnxModel&&) noexcept = default;
OnnxModel& OnnxModel::operator=(OnnxModel&&) noexcept = default;
OnnxModel::~OnnxModel() = default;

std::vector<ModelInput> OnnxModel::inputs() const {
  const auto inits = initializer_names(proto_->graph());
  std::vector<ModelInput> out;
  for (const auto& v : proto_->graph().input())
    if (!inits.count(v.name())) out.push_back(describe_input(v));
  return out;
}

std::vector<std::string> OnnxModel::output_names() const {
  std::vector<std::string> out;
  for (const auto& v : proto_->graph().output()) out.push_back(v.name());
  return out;
}

std::vector<std::string> OnnxModel::shape_inputs() const {
  std::set<std::string> runtime;
  for (const auto& in : inputs()) runtime.insert(in.name);
  std::vector<std::string> out;
  for (const auto& n : proto_->graph().node()) {
    auto it = shape_operands().find(n.op_type());
    if (it == shape_operands().end()) continue;
    for (int pos : it->second)
      if (pos < n.input_size() && runtime.count(n.input(pos)) &&
          std::find(out.begin(), out.end(), n.input(pos)) == out.end())
        out.push_back(n.input(pos));
  }
  return out;
}

OnnxModel load_onnx(const std::string& path) {
  std::error_code ec;
  DC_USER_CHECK(fs::exists(path, ec), "'", path, "' does not exist");
  DC_USER_CHECK(fs::is_regular_file(path, ec), "'", path, "' is not a regular file");
  const auto size = fs::file_size(path, ec);
  DC_USER_CHECK(!ec, "cannot read '", path, "': ", ec.message());
  DC_USER_CHECK(size > 0, "'", path, "' is empty, not an ONNX model");
  DC_USER_CHECK(size < (uint64_t{2} << 30), "'", path,
                "' is larger than 2 GiB; store the weights as ONNX external data");
  const MappedFile file(path);
  auto proto = std::make_unique<onnx::ModelProto>();
  std::map<int, FileSlice> raw_data_in_file;
  auto slim = slim_model(file.data(), file.size(), kInlineExternalBytes);
  const bool parsed = slim ? proto->ParseFromString(slim->proto)
                           : proto->ParseFromArray(file.data(), static_cast<int>(file.size()));
  DC_USER_CHECK(parsed, "'", path,
                "' is not an ONNX model (protobuf parsing fails: truncated or not a ModelProto)");
  DC_USER_CHECK(proto->has_graph() && proto->opset_import_size() > 0, "'", path,
                "' is not an ONNX model (no graph or no opset_import)");
  if (slim) raw_data_in_file = std::move(slim->raw_data);
  return OnnxModel(std::move(proto), path, std::move(raw_data_in_file));
}

Graph import_onnx(OnnxModel model, const ImportOptions& opts) {
  PhaseClock clock;  // debug log: where import's time goes (docs/bench/scale.md)
  onnx::ModelProto& m = model.proto();
  const std::string model_dir = fs::path(model.path()).parent_path().string();
  check_opset(m);
  check_supported_ops(m);
  apply_input_shapes(*m.mutable_graph(), opts.input_shapes);
  bind_constants(*m.mutable_graph(), opts.bind_constants);
  check_static_inputs(m.graph());
  check_inputs_defined(m.graph());
  check_acyclic(m.graph());
  clock.lap("structural checks");
  auto on_disk = detach_external_data(*m.mutable_graph(), model_dir, model.raw_data_in_file(),
                                      fs::absolute(model.path()).string());
  clock.lap("external data");
  if (const auto adapted = adapt_opset(m); !adapted.how.empty()) spdlog::info("{}", adapted.how);
  run_checker(m);
  clock.lap("onnx checker");
  run_shape_inference(m);
  clock.lap("onnx shape inference");
  Graph g = convert(m, model_dir, std::move(on_disk));
  clock.lap("conversion");
  g = topo_sort(std::move(g));
  clock.lap("topological sort");
  complete_shapes(g, m.graph());
  clock.lap("static shapes");
  check_nodes(g);
  clock.lap("per-op checks");
  spdlog::debug("imported '{}': opset {}, {} nodes, {} initializers", model.path(), g.opset,
                g.nodes.size(), g.initializers.size());
  return g;
}

Graph import_onnx_file(const std::string& path, const ImportOptions& opts) {
  return import_onnx(load_onnx(path), opts);
}

Shape parse_shape(const std::string& text) {
  Shape out;
  std::string cur;
  auto flush = [&] {
    DC_USER_CHECK(!cur.empty() && cur.find_first_not_of("0123456789") == std::string::npos &&
                      cur.size() < 12,
                  "bad shape '", text, "': expected positive integers like 1x3x224x224");
    out.push_back(std::stoll(cur));
    DC_USER_CHECK(out.back() > 0, "bad shape '", text, "': dimensions must be positive");
    cur.clear();
  };
  for (char c : text) {
    if (c == 'x' || c == ',' || c == 'X') flush();
    else cur += c;
  }
  flush();
  return out;
}

}  // namespace dc
