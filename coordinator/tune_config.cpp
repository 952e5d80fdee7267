#include "tune_config.h"

#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "ir/error.h"
#include "param_space.h"

namespace dc {

namespace {

const std::set<std::string> kPrecisions = {"fp32", "tf32", "fp16", "bf16"};

ClusterKind kind_from_name(const std::string& name, const std::string& where) {
  for (ClusterKind k : {ClusterKind::gemm, ClusterKind::conv, ClusterKind::depthwise,
                        ClusterKind::reduction, ClusterKind::elementwise, ClusterKind::attention,
                        ClusterKind::opaque})
    if (name == cluster_kind_name(k)) return k;
  throw_user_error(where, ": unknown cluster kind '", name,
                   "' (gemm, conv, depthwise, reduction, elementwise, attention, opaque)");
}

template <class T>
T scalar(const YAML::Node& n, const std::string& where) {
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    throw_user_error(where, ": expected a ", std::is_integral_v<T> ? "whole number" : "number");
  }
}

// A key's or a name's text: a mapping, a list or null there is a UserError (yaml-cpp's
// as<std::string>() throws BadConversion for them: a fuzz_tune_config finding).
std::string scalar_text(const YAML::Node& n, const std::string& where) {
  DC_USER_CHECK(n.IsScalar(), where, ": expected a name, not ",
                n.IsMap() ? "a mapping" : n.IsSequence() ? "a list" : "null");
  return n.Scalar();
}

void check_keys(const YAML::Node& map, const std::set<std::string>& allowed, const std::string& where) {
  DC_USER_CHECK(map.IsMap(), where, ": expected a mapping");
  for (const auto& kv : map) {
    const auto key = scalar_text(kv.first, where);
    DC_USER_CHECK(allowed.count(key), where, ": unknown key '", key, "'");
  }
}

}  // namespace

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string p;
  while (std::getline(ss, p, ',')) out.push_back(p);
  return out;
}

void set_plan_precision(PlanOptions* opts, Precision p) {
  opts->precision = p;
  opts->space.precisions = math_paths(p);
}

Precision precision_from_deprecated_list(const std::vector<std::string>& names,
                                         const std::string& what) {
  for (const auto& n : names) parse_precision(n);  // unknown names first
  DC_USER_CHECK(names.size() == 1, what, " is deprecated and takes one value now: a plan has ",
                "one precision; use --precision fp32|tf32|fp16|bf16 (its math paths follow: ",
                "docs/precision.md)");
  std::cerr << "note: " << what << " is deprecated; read as --precision " << names[0] << "\n";
  return parse_precision(names[0]);
}

void check_gpus_have_precision(const std::vector<const GpuSpec*>& gpus, Precision p) {
  if (p == Precision::fp32) return;
  for (const GpuSpec* g : gpus)
    DC_USER_CHECK(gpu_has_precision(*g, std::string(precision_name(p))), "--precision ",
                  precision_name(p), " needs ", p == Precision::fp16 ? "fp16" : precision_name(p),
                  " tensor cores (", p == Precision::fp16 ? "sm_70" : "sm_80", "+), which GPU type ",
                  g->name, " (", g->sm_arch(), ") lacks");
}

void parse_tune_config(const std::string& text, const std::string& origin, PlanOptions* opts,
                       bool* from_db) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw_user_error(origin, ": not valid YAML: ", e.msg, " (line ", e.mark.line + 1, ")");
  }
  if (root.IsNull()) return;
  check_keys(root, {"prune", "precision", "precisions", "calibration", "calibration_from_db"},
             origin);
  if (const auto prune = root["prune"]) {
    const std::string where = origin + ": prune";
    check_keys(prune, {"within", "top_k"}, where);
    if (prune["within"]) opts->prune.within_factor = scalar<double>(prune["within"], where + ".within");
    if (prune["top_k"]) opts->prune.top_k = scalar<int>(prune["top_k"], where + ".top_k");
    DC_USER_CHECK(opts->prune.within_factor >= 1, where, ".within must be >= 1");
    DC_USER_CHECK(opts->prune.top_k >= 1, where, ".top_k must be >= 1");
  }
  DC_USER_CHECK(!(root["precision"] && root["precisions"]), origin,
                ": give precision only (precisions is its deprecated spelling)");
  if (const auto prec = root["precision"]) {
    DC_USER_CHECK(prec.IsScalar(), origin, ": precision must be one of fp32, tf32, fp16, bf16");
    const auto name = prec.as<std::string>();
    DC_USER_CHECK(precision_from_name(name).has_value(), origin, ": unknown precision '", name,
                  "' (use fp32, tf32, fp16 or bf16)");
    set_plan_precision(opts, parse_precision(name));
  }
  if (const auto prec = root["precisions"]) {
    DC_USER_CHECK(prec.IsSequence() && prec.size() > 0, origin,
                  ": precisions must be a non-empty list (deprecated: use precision: P)");
    std::vector<std::string> names;
    for (const auto& p : prec) {
      const auto name = scalar_text(p, origin + ": precisions");
      DC_USER_CHECK(kPrecisions.count(name), origin, ": unknown precision '", name, "'");
      names.push_back(name);
    }
    set_plan_precision(opts, precision_from_deprecated_list(names, origin + ": precisions"));
  }
  if (const auto cal = root["calibration"]) {
    DC_USER_CHECK(cal.IsMap(), origin, ": calibration must map GPU types to {kind: factor}");
    for (const auto& gpu : cal) {
      const auto gpu_name = scalar_text(gpu.first, origin + ": calibration");
      const std::string where = origin + ": calibration." + gpu_name;
      DC_USER_CHECK(gpu.second.IsMap(), where, ": expected {kind: factor}");
      for (const auto& kf : gpu.second) {
        const auto kind_name = scalar_text(kf.first, where);
        const double f = scalar<double>(kf.second, where + "." + kind_name);
        DC_USER_CHECK(f > 0 && f < 100, where, ".", kind_name, ": factor must be in (0, 100)");
        opts->calibration.set(gpu_name, kind_from_name(kind_name, where), f);
      }
    }
  }
  if (const auto db = root["calibration_from_db"]) {
    bool value = true;
    try {
      value = db.as<bool>();
    } catch (const YAML::Exception&) {
      throw_user_error(origin, ": calibration_from_db must be true or false");
    }
    if (from_db) *from_db = value;
  }
}

void load_tune_config(const std::string& path, PlanOptions* opts, bool* from_db) {
  std::ifstream in(path);
  DC_USER_CHECK(in.good(), "cannot read config file '", path, "'");
  std::stringstream buf;
  buf << in.rdbuf();
  parse_tune_config(buf.str(), path, opts, from_db);
}

}  // namespace dc
