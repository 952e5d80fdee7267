// plan.json both ways. Written with JsonWriter, one tensor / module / step per line so that
// a reader can grep and diff it; read with dc's strict JSON reader (common/json, so that
// libdcrt needs no yaml-cpp) through a small typed accessor that names the field path in
// every message ("steps[3].module: expected an integer"). Unknown keys are ignored: a
// version only ever adds fields.
#include <cmath>
#include <optional>
#include <sstream>

#include "ir/error.h"
#include "ir/json_writer.h"
#include "json/json.h"
#include "plan/memory_report.h"
#include "plan_format.h"

namespace dc {

namespace {

constexpr DType kAllDTypes[] = {DType::f32, DType::u8,  DType::i8,      DType::u16, DType::i16,
                                DType::i32, DType::i64, DType::boolean, DType::f16, DType::f64,
                                DType::u32, DType::u64, DType::bf16};
constexpr PlanTensorKind kAllKinds[] = {PlanTensorKind::input, PlanTensorKind::output,
                                        PlanTensorKind::weight, PlanTensorKind::intermediate,
                                        PlanTensorKind::scratch, PlanTensorKind::view};
constexpr BufferRole kAllRoles[] = {BufferRole::input, BufferRole::output, BufferRole::scratch};
// No tensor of a plan comes near this; it keeps byte counts far from int64 overflow.
constexpr int64_t kMaxTensorBytes = int64_t{1} << 48;

// ---- writing ----

// The top-level object, one field per line.
class TopLevel {
 public:
  explicit TopLevel(std::ostream& os) : os_(os) {}
  JsonWriter key(std::string_view k) {
    os_ << (first_ ? "{\n  " : ",\n  ");
    first_ = false;
    JsonWriter w(os_);
    w.key(k);
    return w;
  }
  void end() { os_ << "\n}\n"; }

 private:
  std::ostream& os_;
  bool first_ = true;
};

// An array with one item per line, each item written by its own JsonWriter.
template <class WriteItem>
void array_of_lines(std::ostream& os, size_t n, WriteItem write_item) {
  os << '[';
  for (size_t i = 0; i < n; ++i) {
    os << (i ? ",\n    " : "\n    ");
    JsonWriter w(os);
    write_item(w, i);
  }
  os << (n ? "\n  ]" : "]");
}

void write_ints(JsonWriter& w, const std::vector<int>& v) {
  w.begin_array();
  for (int x : v) w.value(x);
  w.end_array();
}

void write_strings(JsonWriter& w, const std::vector<std::string>& v) {
  w.begin_array();
  for (const auto& s : v) w.value(s);
  w.end_array();
}

void write_dim3(JsonWriter& w, const std::array<int64_t, 3>& d) {
  w.value(std::vector<int64_t>(d.begin(), d.end()));
}

void write_tensor(JsonWriter& w, const PlanTensor& t) {
  w.begin_object()
      .field("name", t.name)
      .field("kind", plan_tensor_kind_name(t.kind))
      .field("dtype", dtype_name(t.dtype))
      .field("shape", t.shape)
      .field("offset", t.offset)
      .field("first_step", t.first_step)
      .field("last_step", t.last_step);
  if (t.kind == PlanTensorKind::view) w.field("view_of", t.view_of);
  w.end_object();
}

void write_view(JsonWriter& w, const PlanView& v) {
  w.begin_object().field("cluster", v.cluster);
  write_strings(w.key("nodes"), v.nodes);
  w.end_object();
}

void write_module(JsonWriter& w, const GeneratedKernel& m, const ModuleSource& src) {
  w.begin_object().field("template_name", m.template_name).field("variant_key", m.variant_key);
  w.key("source").begin_object()
      .field("offset", src.offset)
      .field("bytes", src.bytes)
      .field("prelude_at", src.prelude_at)
      .end_object();
  w.key("buffers").begin_array();
  for (const auto& b : m.buffers)
    w.begin_object()
        .field("name", b.name)
        .field("role", buffer_role_name(b.role))
        .field("dtype", dtype_name(b.dtype))
        .field("shape", b.shape)
        .field("zero_init", b.zero_init)
        .end_object();
  w.end_array();
  w.key("launches").begin_array();
  for (const auto& l : m.launches) {
    w.begin_object().field("kernel", l.kernel);
    write_dim3(w.key("grid"), l.grid);
    write_dim3(w.key("block"), l.block);
    w.field("dynamic_smem_bytes", l.dynamic_smem_bytes);
    write_ints(w.key("args"), l.args);
    w.end_object();
  }
  w.end_array().end_object();
}

void write_step(JsonWriter& w, const PlanStep& s) {
  w.begin_object().field("module", s.module);
  write_ints(w.key("buffers"), s.buffers);
  w.field("cluster", s.cluster);
  write_strings(w.key("nodes"), s.nodes);
  w.field("workload", s.workload)
      .field("variant_key", s.variant_key)
      .field("reference", s.reference)
      .field("measured_us", s.measured_us)
      .field("estimated_us", s.estimated_us)
      .end_object();
}

void write_file_sum(JsonWriter& w, const FileSum& f) {
  w.begin_object().field("bytes", f.bytes).field("fnv1a", f.fnv1a).end_object();
}

// ---- reading ----

// A plan.json value with its field path, for messages.
class Field {
 public:
  Field(const json::Value* node, std::string path, const std::string& file)
      : node_(node), path_(std::move(path)), file_(file) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw_user_error(file_, ": ", path_.empty() ? "" : path_ + ": ", problem, " (line ",
                     node_->line, ", column ", node_->column, ")");
  }

  bool has(const char* key) const { return node_->type == json::Type::object && node_->find(key); }
  Field operator[](const char* key) const {
    if (node_->type != json::Type::object) fail("expected an object");
    const std::string path = path_.empty() ? key : path_ + "." + key;
    const json::Value* child = node_->find(key);
    if (!child) Field(node_, path, file_).fail("missing");
    return Field(child, path, file_);
  }
  std::vector<Field> items() const {
    if (node_->type != json::Type::array) fail("expected an array");
    std::vector<Field> out;
    for (size_t i = 0; i < node_->items.size(); ++i)
      out.emplace_back(&node_->items[i], path_ + "[" + std::to_string(i) + "]", file_);
    return out;
  }

  std::vector<std::pair<std::string, Field>> members() const {
    if (node_->type != json::Type::object) fail("expected an object");
    std::vector<std::pair<std::string, Field>> out;
    for (const auto& m : node_->members)
      out.emplace_back(m.key, Field(&m.value, path_ + "." + m.key, file_));
    return out;
  }

  std::string str() const {
    if (node_->type != json::Type::string) fail("expected a string");
    return node_->text;
  }
  bool boolean() const {
    if (node_->type != json::Type::boolean) fail("expected true or false");
    return node_->boolean;
  }
  int64_t i64() const {
    int64_t v = 0;
    if (!node_->integer(&v)) fail("expected an integer");
    return v;
  }
  int i32() const {
    const int64_t v = i64();
    if (v < INT32_MIN || v > INT32_MAX) fail("integer out of range");
    return static_cast<int>(v);
  }
  double number() const {
    if (node_->type != json::Type::number) fail("expected a number");
    return node_->number;
  }

  std::vector<int64_t> i64s() const { return map_items<int64_t>(&Field::i64); }
  std::vector<int> i32s() const { return map_items<int>(&Field::i32); }
  std::vector<std::string> strs() const { return map_items<std::string>(&Field::str); }

  DType dtype() const {
    const std::string s = str();
    for (DType t : kAllDTypes)
      if (dtype_name(t) == s) return t;
    fail("unknown dtype '" + s + "'");
  }
  Shape shape() const {
    Shape s = i64s();
    int64_t numel = 1;
    for (int64_t d : s) {
      if (d < 0) fail("negative dimension " + std::to_string(d));
      if (d != 0 && numel > kMaxTensorBytes / d) fail("shape too large");
      numel *= d;
    }
    return s;
  }
  template <class Enum, size_t N, class NameOf>
  Enum one_of(const Enum (&values)[N], NameOf name_of) const {
    const std::string s = str();
    std::string known;
    for (Enum e : values) {
      if (s == name_of(e)) return e;
      known += std::string(known.empty() ? "" : ", ") + name_of(e);
    }
    fail("unknown value '" + s + "' (" + known + ")");
  }

 private:
  template <class T>
  std::vector<T> map_items(T (Field::*get)() const) const {
    std::vector<T> out;
    for (const auto& item : items()) out.push_back((item.*get)());
    return out;
  }

  const json::Value* node_;
  std::string path_;
  const std::string& file_;
};

void check_format(const Field& root) {
  const std::string format = root["format"].str();
  if (format == kPlanFormat) return;
  if (format.rfind("dc-plan/", 0) == 0)
    root.fail("plan format " + format + " is not supported by this dc (reads " + kPlanFormat + ")");
  root.fail("not a dc plan (format '" + format + "')");
}

PlanTensor read_tensor(const Field& f) {
  PlanTensor t;
  t.name = f["name"].str();
  t.kind = f["kind"].one_of(kAllKinds, plan_tensor_kind_name);
  t.dtype = f["dtype"].dtype();
  t.shape = f["shape"].shape();
  if (t.bytes() > kMaxTensorBytes) f["shape"].fail("tensor too large");
  t.offset = f["offset"].i64();
  t.first_step = f["first_step"].i32();
  t.last_step = f["last_step"].i32();
  if (t.kind == PlanTensorKind::view) t.view_of = f["view_of"].i32();
  return t;
}

std::array<int64_t, 3> read_dim3(const Field& f) {
  const auto v = f.i64s();
  if (v.size() != 3) f.fail("expected 3 integers");
  return {v[0], v[1], v[2]};
}

GeneratedKernel read_module(const Field& f, ModuleSource* src) {
  GeneratedKernel m;
  m.template_name = f["template_name"].str();
  m.variant_key = f["variant_key"].str();
  const Field s = f["source"];
  src->offset = s["offset"].i64();
  src->bytes = s["bytes"].i64();
  src->prelude_at = s["prelude_at"].i64();
  for (const auto& b : f["buffers"].items()) {
    KernelBuffer kb;
    kb.name = b["name"].str();
    kb.role = b["role"].one_of(kAllRoles, buffer_role_name);
    kb.dtype = b["dtype"].dtype();
    kb.shape = b["shape"].shape();
    kb.zero_init = b["zero_init"].boolean();
    m.buffers.push_back(std::move(kb));
  }
  for (const auto& l : f["launches"].items()) {
    Launch launch;
    launch.kernel = l["kernel"].str();
    launch.grid = read_dim3(l["grid"]);
    launch.block = read_dim3(l["block"]);
    launch.dynamic_smem_bytes = l["dynamic_smem_bytes"].i64();
    launch.args = l["args"].i32s();
    m.launches.push_back(std::move(launch));
  }
  return m;
}

PlanStep read_step(const Field& f) {
  PlanStep s;
  s.module = f["module"].i32();
  s.buffers = f["buffers"].i32s();
  s.cluster = f["cluster"].str();
  s.nodes = f["nodes"].strs();
  s.workload = f["workload"].str();
  s.variant_key = f["variant_key"].str();
  s.reference = f["reference"].boolean();
  s.measured_us = f["measured_us"].number();
  s.estimated_us = f["estimated_us"].number();
  return s;
}

FileSum read_file_sum(const Field& f) {
  return {f["bytes"].i64(), f["fnv1a"].str()};
}

// Derived from the tensors (plan/memory_report.h): written for people and tools, ignored on read.
void write_memory(JsonWriter& w, const PlanMemoryReport& m) {
  w.begin_object().field("total_bytes", m.total).field("weights_bytes", m.weights);
  w.field("optimizer_state_bytes", m.optimizer_state).field("other_state_bytes", m.other_state);
  w.field("constants_bytes", m.constants).field("io_bytes", m.io).field("state_next_bytes", m.state_next);
  w.field("arena_bytes", m.arena).field("arena_peak_live_bytes", m.arena_peak_live);
  if (m.backward_step >= 0) {
    w.field("gradients_bytes", m.gradients).field("backward_step", m.backward_step);
    w.key("saved_for_backward").begin_object().field("bytes", m.saved_bytes).field("count", m.saved_count);
    w.key("largest").begin_array();
    for (const auto& t : m.largest_saved) w.begin_object().field("name", t.name).field("bytes", t.bytes).end_object();
    w.end_array().end_object();
  }
  w.end_object();
}

void write_training(JsonWriter& w, const PlanTraining& t) {
  w.begin_object()
      .field("loss", t.loss)
      .field("labels", t.labels)
      .field("optimizer", t.optimizer);
  w.key("hyperparameters").begin_object();
  for (const auto& [name, value] : t.hyperparameters) w.field(name, value);
  w.end_object();
  w.field("source_model", t.source_model).field("model_outputs", t.model_outputs);
  w.key("state").begin_array();
  for (const auto& u : t.state) w.value(std::vector<int64_t>{u.state, u.next});
  w.end_array();
  if (const auto& m = t.mixed_precision) {
    w.key("mixed_precision").begin_object().field("dtype", m->dtype);
    if (!m->loss_scale.empty())
      w.key("loss_scaling").begin_object()
          .field("scale", m->loss_scale)
          .field("growth_tracker", m->growth_tracker)
          .field("init_scale", m->init_scale)
          .field("growth_factor", m->growth_factor)
          .field("backoff_factor", m->backoff_factor)
          .field("growth_interval", m->growth_interval)
          .end_object();
    w.end_object();
  }
  w.end_object();
}

PlanMixedPrecision read_mixed_precision(const Field& f) {
  PlanMixedPrecision m;
  m.dtype = f["dtype"].str();
  if (m.dtype != "f16" && m.dtype != "bf16") f["dtype"].fail("expected \"f16\" or \"bf16\"");
  if (!f.has("loss_scaling")) return m;
  const Field& s = f["loss_scaling"];
  m.loss_scale = s["scale"].str();
  m.growth_tracker = s["growth_tracker"].str();
  m.init_scale = s["init_scale"].number();
  m.growth_factor = s["growth_factor"].number();
  m.backoff_factor = s["backoff_factor"].number();
  m.growth_interval = s["growth_interval"].i64();
  return m;
}

PlanTraining read_training(const Field& f) {
  PlanTraining t;
  t.loss = f["loss"].str();
  t.labels = f["labels"].str();
  t.optimizer = f["optimizer"].str();
  for (const auto& [name, value] : f["hyperparameters"].members())
    t.hyperparameters.emplace_back(name, value.number());
  t.source_model = f["source_model"].str();
  t.model_outputs = f["model_outputs"].i32();
  for (const auto& u : f["state"].items()) {
    const std::vector<int> pair = u.i32s();
    if (pair.size() != 2) u.fail("expected [state tensor, next output tensor]");
    t.state.push_back({pair[0], pair[1]});
  }
  if (f.has("mixed_precision")) t.mixed_precision = read_mixed_precision(f["mixed_precision"]);
  return t;
}

ExecPlan read_plan_fields(const Field& root, PlanFiles* files) {
  check_format(root);
  ExecPlan p;
  p.model_name = root["model_name"].str();
  p.model_sha256 = root["model_sha256"].str();
  p.gpu_type = root["gpu_type"].str();
  p.gpu_name = root["gpu_name"].str();
  p.gpu_arch = root["gpu_arch"].str();
  p.nvrtc_version = root["nvrtc_version"].str();
  p.emulated = root["emulated"].boolean();
  if (root.has("precision")) {
    const std::string name = root["precision"].str();
    const auto prec = precision_from_name(name);
    if (!prec) root["precision"].fail("unknown precision '" + name + "' (fp32, tf32, fp16, bf16)");
    p.precision = *prec;
  }
  p.measured_total_us = root["measured_total_us"].number();
  p.estimated_total_us = root["estimated_total_us"].number();
  p.reference_steps = root["reference_steps"].i32();
  p.weight_transforms = root["weight_transforms"].strs();
  p.arena_bytes = root["arena_bytes"].i64();
  p.unshared_bytes = root["unshared_bytes"].i64();
  p.inputs = root["inputs"].i32s();
  p.outputs = root["outputs"].i32s();
  for (const auto& t : root["tensors"].items()) p.tensors.push_back(read_tensor(t));
  for (const auto& m : root["modules"].items()) {
    files->sources.emplace_back();
    p.modules.push_back(read_module(m, &files->sources.back()));
  }
  for (const auto& s : root["steps"].items()) p.steps.push_back(read_step(s));
  if (root.has("views"))  // plans written before views existed have none
    for (const auto& v : root["views"].items()) p.views.push_back({v["cluster"].str(), v["nodes"].strs()});
  if (root.has("mode")) {  // plans written before training existed are inference plans
    const std::string mode = root["mode"].str();
    if (mode == "train") p.training = read_training(root["training"]);
    else if (mode != "infer") root["mode"].fail("unknown mode '" + mode + "' (infer, train)");
  }
  files->kernels = read_file_sum(root["files"]["kernels.cu"]);
  files->weights = read_file_sum(root["files"]["weights.bin"]);
  return p;
}

}  // namespace

std::string plan_json_text(const ExecPlan& p, const PlanFiles& files) {
  DC_INTERNAL_CHECK(files.sources.size() == p.modules.size(), "plan_json_text: ",
                    files.sources.size(), " source ranges for ", p.modules.size(), " modules");
  std::ostringstream os;
  TopLevel top(os);
  top.key("format").value(kPlanFormat);
  top.key("model_name").value(p.model_name);
  top.key("model_sha256").value(p.model_sha256);
  top.key("gpu_type").value(p.gpu_type);
  top.key("gpu_name").value(p.gpu_name);
  top.key("gpu_arch").value(p.gpu_arch);
  top.key("nvrtc_version").value(p.nvrtc_version);
  top.key("emulated").value(p.emulated);
  top.key("precision").value(std::string(precision_name(p.precision)));
  top.key("mode").value(p.training ? "train" : "infer");
  if (p.training) {
    auto training = top.key("training");
    write_training(training, *p.training);
  }
  top.key("measured_total_us").value(p.measured_total_us);
  top.key("estimated_total_us").value(p.estimated_total_us);
  top.key("reference_steps").value(p.reference_steps);
  auto transforms = top.key("weight_transforms");
  write_strings(transforms, p.weight_transforms);
  top.key("arena_bytes").value(p.arena_bytes);
  top.key("unshared_bytes").value(p.unshared_bytes);
  auto memory = top.key("memory");
  write_memory(memory, memory_report(p));
  auto inputs = top.key("inputs");
  write_ints(inputs, p.inputs);
  auto outputs = top.key("outputs");
  write_ints(outputs, p.outputs);
  auto file_sums = top.key("files");
  file_sums.begin_object();
  write_file_sum(file_sums.key("kernels.cu"), files.kernels);
  write_file_sum(file_sums.key("weights.bin"), files.weights);
  file_sums.end_object();
  top.key("tensors");
  array_of_lines(os, p.tensors.size(), [&](JsonWriter& w, size_t i) { write_tensor(w, p.tensors[i]); });
  top.key("modules");
  array_of_lines(os, p.modules.size(),
                 [&](JsonWriter& w, size_t i) { write_module(w, p.modules[i], files.sources[i]); });
  top.key("steps");
  array_of_lines(os, p.steps.size(), [&](JsonWriter& w, size_t i) { write_step(w, p.steps[i]); });
  top.key("views");
  array_of_lines(os, p.views.size(), [&](JsonWriter& w, size_t i) { write_view(w, p.views[i]); });
  top.end();
  return os.str();
}

ExecPlan parse_plan_json(const std::string& text, const std::string& file, PlanFiles* files) {
  const json::Value root = json::parse(text, file);
  DC_USER_CHECK(root.type == json::Type::object, file, ": expected a JSON object, found ",
                json::type_name(root.type));
  return read_plan_fields(Field(&root, "", file), files);
}

}  // namespace dc
