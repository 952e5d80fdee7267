// The pairwise ranking calibration's features (rank_features.h). The derived figures follow
// session 27's prototype (docs/bench/estimator-accuracy.md, "Calibrations of the ranking"),
// with the device's compute units, L1 and last-level cache from the GPU table.
#include "rank_features.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace dc {

namespace {

double lg(double v) { return std::log2(std::max(v, 1e-9)); }

// Padding waste of tiling n by b: ceil(n / b) * b / n.
double pad(double n, double b) { return std::ceil(n / b) * b / n; }

int64_t param(const std::map<std::string, int64_t>& p, const char* name, int64_t otherwise) {
  auto it = p.find(name);
  return it == p.end() ? otherwise : it->second;
}

// log2 of the work-groups and the last wave's fill over the compute units.
void waves(double groups, const GpuSpec& gpu, RankFeatures& f) {
  const double cu = std::max(gpu.sm_count, 1);
  f["lgroups"] = lg(groups);
  f["fill"] = groups / (std::ceil(groups / cu) * cu);
}

// log2 of a footprint over L1, 0 below it (and where the table gives no L1).
double over_l1(double bytes, const GpuSpec& gpu) {
  return gpu.l1_bytes > 0 ? std::max(0.0, lg(bytes / static_cast<double>(gpu.l1_bytes))) : 0.0;
}

void conv_gemm(const std::map<std::string, int64_t>& p, const WorkloadShape& s, const GpuSpec& gpu,
               RankFeatures& f) {
  const double M = s.m, N = s.n, K = s.k;
  const double bm = param(p, "block_m", 1), bn = param(p, "block_n", 1), bk = param(p, "block_k", 1);
  const double tm = param(p, "thread_m", 1), tn = param(p, "thread_n", 1);
  const double vec = param(p, "vec", 1), stages = param(p, "stages", 1);
  const double wi = std::floor(bm / tm) * std::floor(bn / tn);
  waves(std::ceil(M / bm) * std::ceil(N / bn) * param(p, "split_k", 1) * std::max<int64_t>(s.groups, 1), gpu, f);
  const double foot = (bm + bn) * (bk + 4) * 4 * stages + wi * tm * tn * 4;
  const bool pointwise = s.kernel_h * s.kernel_w == 1 && s.stride_h == 1;
  f["lbm"] = lg(bm), f["lbn"] = lg(bn), f["lbk"] = lg(bk), f["ltm"] = lg(tm), f["ltn"] = lg(tn);
  f["lvec"] = lg(vec), f["stages2"] = stages > 1, f["bk32"] = bk >= 32;
  f["padm"] = lg(pad(M, bm)), f["padn"] = lg(pad(N, bn)), f["padk"] = lg(pad(K, bk));
  f["lwi"] = lg(wi), f["lfoot_l1"] = over_l1(foot, gpu);
  f["foot_l2"] = gpu.l2_bytes > 0 && foot > static_cast<double>(gpu.l2_bytes);
  f["lacc"] = lg(tm * tn), f["ktiles"] = lg(std::ceil(K / bk)), f["vec_gather"] = vec > 1 && !pointwise;
}

void depthwise(const std::map<std::string, int64_t>& p, const WorkloadShape& s, const GpuSpec& gpu,
               RankFeatures& f) {
  const double C = s.out_channels, H = s.out_h, W = s.out_w, kh = s.kernel_h, st = s.stride_h;
  const double th = param(p, "tile_h", 1), tw = param(p, "tile_w", 1), bc = param(p, "block_c", 1);
  const double ppt = param(p, "pixels_per_thread", 1);
  waves(std::ceil(C / bc) * std::ceil(H / th) * std::ceil(W / tw), gpu, f);
  const double in_h = (th - 1) * st + kh, in_w = (tw - 1) * st + kh;
  f["lth"] = lg(th), f["ltw"] = lg(tw), f["lbc"] = lg(bc), f["lppt"] = lg(ppt);
  f["padh"] = lg(pad(H, th)), f["padw"] = lg(pad(W, tw)), f["lwi"] = lg(std::floor(bc * th * tw / ppt));
  f["lhalo"] = lg(in_h * in_w / (th * tw)), f["lfoot_l1"] = over_l1(bc * in_h * in_w * 4, gpu);
  f["ltw_w"] = lg(tw / W);
}

void elementwise(const std::map<std::string, int64_t>& p, const WorkloadShape& s, const GpuSpec& gpu,
                 RankFeatures& f) {
  const double th = param(p, "threads", 1), ept = param(p, "elems_per_thread", 1), vec = param(p, "vec", 1);
  const double per = th * ept * vec, E = std::max<double>(s.elements, 1);
  waves(std::ceil(E / per), gpu, f);
  f["lth"] = lg(th), f["lept"] = lg(ept), f["lvec"] = lg(vec), f["pad"] = lg(pad(E, per));
  f["lper_item"] = lg(ept * vec);
}

void row_reduce(const std::map<std::string, int64_t>& p, RankFeatures& f) {
  f["lrpb"] = lg(param(p, "rows_per_block", 1)), f["ltpr"] = lg(param(p, "threads_per_row", 1));
  f["lvec"] = lg(param(p, "vec", 1)), f["cache"] = static_cast<double>(param(p, "cache", 0));
}

// Any other template: log2 of every parameter (a flag such as cache as it is).
void key_only(const std::map<std::string, int64_t>& p, RankFeatures& f) {
  for (const auto& [name, value] : p) f["l" + name] = name == "cache" ? value : lg(static_cast<double>(value));
}

}  // namespace

RankFeatures rank_features(const std::string& template_name, const std::map<std::string, int64_t>& params,
                           const WorkloadShape& shape, const GpuSpec& gpu, double estimate_us) {
  RankFeatures f;
  if (template_name == "conv_implicit_gemm" && shape.m > 0 && shape.n > 0 && shape.k > 0)
    conv_gemm(params, shape, gpu, f);
  else if (template_name == "depthwise_direct" && shape.out_h > 0 && shape.out_w > 0 && shape.out_channels > 0)
    depthwise(params, shape, gpu, f);
  else if (template_name == "elementwise")
    elementwise(params, shape, gpu, f);
  else if (template_name == "row_reduce")
    row_reduce(params, f);
  else
    key_only(params, f);
  f["lest"] = std::log(std::max(estimate_us, 1e-9));
  return f;
}

double RankVector::log_score(const RankFeatures& x) const {
  double sum = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = x.find(names[i]);
    sum += weights[i] * ((it == x.end() ? 0.0 : it->second) - means[i]);
  }
  return sum;
}

namespace {

std::vector<int64_t> dims_of(const std::string& type) {  // "f32[1,32,112,112]"
  std::vector<int64_t> out;
  const size_t open = type.find('['), close = type.find(']');
  if (open == std::string::npos || close == std::string::npos) return out;
  std::stringstream ss(type.substr(open + 1, close - open - 1));
  for (std::string d; std::getline(ss, d, ',');) out.push_back(std::stoll(d));
  return out;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string s; std::getline(ss, s, sep);) out.push_back(s);
  return out;
}

// The first int of attribute `name` in "Conv(dilations=[1,1],group=1,strides=[2,2])".
int64_t attr_int(const std::string& attrs, const std::string& name, int64_t otherwise) {
  const size_t at = attrs.find(name + "=");
  if (at == std::string::npos) return otherwise;
  size_t i = at + name.size() + 1;
  if (attrs[i] == '[') ++i;
  return std::stoll(attrs.substr(i));
}

void conv_geometry(const std::vector<int64_t>& x, const std::vector<int64_t>& w, const std::vector<int64_t>& y,
                   const std::string& attrs, WorkloadShape& s) {
  s.groups = attr_int(attrs, "group", 1);
  s.images = x[0], s.in_channels = x[1], s.out_channels = y[1], s.out_h = y[2], s.out_w = y[3];
  s.kernel_h = w[2], s.kernel_w = w[3];
  const size_t strides = attrs.find("strides=[");
  if (strides != std::string::npos) {
    const std::vector<std::string> st = split(attrs.substr(strides + 9, attrs.find(']', strides) - strides - 9), ',');
    s.stride_h = std::stoll(st.at(0)), s.stride_w = std::stoll(st.at(1));
  }
  if (s.groups > 1 && s.in_channels / s.groups == 1) {
    s.family = Family::depthwise;
    return;
  }
  s.family = Family::conv;
  s.m = x[0] * y[2] * y[3], s.n = w[0] / s.groups, s.k = w[1] * w[2] * w[3], s.batch = s.groups;
}

}  // namespace

std::optional<WorkloadShape> rank_shape_of_canonical(const std::string& canonical) try {
  WorkloadShape s;
  std::map<std::string, std::vector<int64_t>> dims;  // tensor -> shape
  std::stringstream lines(canonical);
  for (std::string line; std::getline(lines, line);) {
    const std::vector<std::string> tok = split(line, ' ');
    if (tok.size() >= 4 && tok[0] == "in") dims[tok[1]] = dims_of(tok[3]);
    if (tok.size() >= 2 && tok[0] == "out")
      for (const std::string& t : split(tok[1], ','))
        if (dims.count(t)) {
          int64_t n = 1;
          for (int64_t d : dims[t]) n *= d;
          s.elements = std::max(s.elements, n);
        }
    if (line.empty() || line[0] != 'n' || line.find(" -> ") == std::string::npos) continue;
    const size_t arrow = line.rfind(" -> ");
    std::vector<std::string> outs;  // "t3 : f32[1,8], t4 : f32[8]"
    const std::vector<std::string> parts = split(line.substr(arrow + 4), ' ');
    for (size_t i = 0; i + 2 < parts.size(); i += 3)
      if (parts[i + 1] == ":") dims[parts[i]] = dims_of(parts[i + 2]), outs.push_back(parts[i]);
    if (tok[1].rfind("Conv(", 0) != 0 || outs.empty()) continue;
    const std::vector<std::string> ins = split(tok[2], ',');
    if (ins.size() < 2 || dims[ins[0]].size() != 4 || dims[ins[1]].size() != 4 || dims[outs[0]].size() != 4)
      return std::nullopt;
    conv_geometry(dims[ins[0]], dims[ins[1]], dims[outs[0]], tok[1], s);
  }
  return s;
} catch (const std::exception&) {
  return std::nullopt;
}

}  // namespace dc
