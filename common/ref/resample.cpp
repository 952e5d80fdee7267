#include "ref/resample.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "ir/error.h"

namespace dc::ref {

namespace {

bool present(const std::vector<Tensor>& p, size_t i) {
  return i < p.size() && p[i].defined() && p[i].numel() > 0;
}

// Axes of an opset-18 `axes` input or attribute, normalised; all axes when absent.
std::vector<int64_t> axes_of(const Node& n, const std::vector<int64_t>& given, int64_t rank) {
  std::vector<int64_t> axes = given;
  if (axes.empty())
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  for (int64_t& a : axes) a = normalize_axis(a, rank, n.op.c_str());
  std::vector<int64_t> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  DC_USER_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
                "'axes' repeats an axis");
  return axes;
}

PadMode parse_pad_mode(const Node& n) {
  const std::string m = n.attrs.get_string("mode", "constant");
  if (m == "constant") return PadMode::constant;
  if (m == "reflect") return PadMode::reflect;
  if (m == "edge") return PadMode::edge;
  if (m == "wrap") return PadMode::wrap;
  throw_user_error("attribute 'mode' is '", m, "', expected constant, reflect, edge or wrap");
}

}  // namespace

const char* pad_mode_name(PadMode m) {
  switch (m) {
    case PadMode::constant: return "constant";
    case PadMode::reflect: return "reflect";
    case PadMode::edge: return "edge";
    case PadMode::wrap: return "wrap";
  }
  return "?";
}

void check_pad_attrs(const Node& n) { parse_pad_mode(n); }

PadSpec pad_spec(const Node& n, const Shape& in, const std::vector<Tensor>& params) {
  const auto rank = static_cast<int64_t>(in.size());
  PadSpec p;
  p.mode = parse_pad_mode(n);
  std::vector<int64_t> pads, axes;
  if (n.attrs.has("pads") || n.attrs.has("paddings")) {  // opset < 11
    pads = n.attrs.get_ints(n.attrs.has("pads") ? "pads" : "paddings");
    p.value = n.attrs.get_float("value", 0.f);
  } else {
    DC_USER_CHECK(present(params, 1) || (params.size() > 1 && params[1].defined()),
                  "input 'pads' (input 1) is missing");
    pads = params[1].to_int64_vector();
    if (present(params, 2)) {
      DC_USER_CHECK(params[2].numel() == 1, "input 'constant_value' must hold one value, has ",
                    params[2].numel());
      p.value = params[2].to_float_vector().at(0);
      if (!is_float(params[2].dtype())) p.value = static_cast<double>(params[2].to_int64_vector()[0]);
    }
    if (present(params, 3)) axes = params[3].to_int64_vector();
  }
  axes = axes_of(n, axes, rank);
  const auto na = static_cast<int64_t>(axes.size());
  DC_USER_CHECK(static_cast<int64_t>(pads.size()) == 2 * na, "'pads' has ", pads.size(),
                " values, expected ", 2 * na, " (begin and end per padded axis)");
  p.begin.assign(in.size(), 0);
  p.end.assign(in.size(), 0);
  for (int64_t i = 0; i < na; ++i) {
    p.begin[static_cast<size_t>(axes[i])] = pads[i];
    p.end[static_cast<size_t>(axes[i])] = pads[i + na];
  }
  for (size_t d = 0; d < in.size(); ++d) {
    const int64_t out = in[d] + p.begin[d] + p.end[d];
    DC_USER_CHECK(out >= 0, "pads ", p.begin[d], ", ", p.end[d], " crop axis ", d, " of extent ",
                  in[d], " below zero");
    if (p.mode != PadMode::constant && out > 0)
      DC_USER_CHECK(in[d] > 0, "mode '", pad_mode_name(p.mode), "' cannot pad the empty axis ", d);
  }
  return p;
}

Shape pad_output_shape(const PadSpec& p, const Shape& in) {
  Shape out = in;
  for (size_t d = 0; d < in.size(); ++d) out[d] = in[d] + p.begin[d] + p.end[d];
  return out;
}

int64_t pad_source(PadMode mode, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PadMode::constant: return -1;
    case PadMode::edge: return i < 0 ? 0 : n - 1;
    case PadMode::wrap: return ((i % n) + n) % n;
    case PadMode::reflect: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      const int64_t m = ((i % period) + period) % period;
      return m < n ? m : period - m;
    }
  }
  return -1;
}

// ---------------------------------------------------------------------------------------
// Resize

namespace {

enum class ResizeMode { nearest, linear, cubic };

struct ResizeAttrs {
  ResizeMode mode = ResizeMode::nearest;
  std::string coord = "half_pixel";
  std::string nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  float extrapolation = 0.f;
  std::string aspect = "stretch";
  std::vector<int64_t> axes;
};

bool legacy_form(const Node& n) { return n.op == "Upsample" || n.inputs.size() <= 2; }

ResizeAttrs resize_attrs(const Node& n) {
  ResizeAttrs a;
  const std::string mode = n.attrs.get_string("mode", "nearest");
  if (mode == "nearest") a.mode = ResizeMode::nearest;
  else if (mode == "linear" || mode == "bilinear") a.mode = ResizeMode::linear;
  else if (mode == "cubic" && n.op == "Resize") a.mode = ResizeMode::cubic;
  else throw_user_error("attribute 'mode' is '", mode, "', expected nearest, linear or cubic");
  if (legacy_form(n)) {  // Upsample and opset-10 Resize: asymmetric, nearest rounds down
    a.coord = "asymmetric";
    a.nearest = "floor";
    return a;
  }
  a.coord = n.attrs.get_string("coordinate_transformation_mode", "half_pixel");
  static const char* coords[] = {"half_pixel", "pytorch_half_pixel", "align_corners",
                                 "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  DC_USER_CHECK(std::find(std::begin(coords), std::end(coords), a.coord) != std::end(coords),
                a.coord == "half_pixel_symmetric" ? "unsupported: " : "",
                "attribute 'coordinate_transformation_mode' is '", a.coord,
                "', dc supports half_pixel, pytorch_half_pixel, align_corners, asymmetric, "
                "tf_half_pixel_for_nn, tf_crop_and_resize");
  a.nearest = n.attrs.get_string("nearest_mode", "round_prefer_floor");
  DC_USER_CHECK(a.nearest == "round_prefer_floor" || a.nearest == "round_prefer_ceil" ||
                    a.nearest == "floor" || a.nearest == "ceil",
                "attribute 'nearest_mode' is '", a.nearest,
                "', expected round_prefer_floor, round_prefer_ceil, floor or ceil");
  a.cubic_a = n.attrs.get_float("cubic_coeff_a", -0.75f);
  const int64_t ex = n.attrs.get_int("exclude_outside", 0);
  DC_USER_CHECK(ex == 0 || ex == 1, "attribute 'exclude_outside' must be 0 or 1, got ", ex);
  a.exclude_outside = ex == 1;
  a.extrapolation = n.attrs.get_float("extrapolation_value", 0.f);
  const int64_t antialias = n.attrs.get_int("antialias", 0);
  DC_USER_CHECK(antialias == 0, "unsupported: Resize with antialias=", antialias,
                " (dc resizes without an antialiasing filter)");
  a.aspect = n.attrs.get_string("keep_aspect_ratio_policy", "stretch");
  DC_USER_CHECK(a.aspect == "stretch" || a.aspect == "not_larger" || a.aspect == "not_smaller",
                "attribute 'keep_aspect_ratio_policy' is '", a.aspect,
                "', expected stretch, not_larger or not_smaller");
  a.axes = n.attrs.get_ints("axes", {});
  return a;
}

// Source coordinate of output position x along one axis (ONNX's reference, operation for
// operation, in double); `outside` for tf_crop_and_resize beyond the input.
double source_coord(const ResizeAttrs& a, double x, double scale, int64_t n, double roi_start,
                    double roi_end, bool& outside) {
  const double out_width = scale * static_cast<double>(n);
  const double last = static_cast<double>(n - 1);
  outside = false;
  if (a.coord == "align_corners") return out_width == 1 ? 0. : x * last / (out_width - 1);
  if (a.coord == "asymmetric") return x / scale;
  if (a.coord == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  if (a.coord == "pytorch_half_pixel") return out_width == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
  if (a.coord == "tf_crop_and_resize") {
    double v = out_width == 1 ? (roi_end - roi_start) * last / 2
                              : x * (roi_end - roi_start) * last / (out_width - 1);
    v += roi_start * last;
    outside = v < 0 || v > last;
    return v;
  }
  return (x + 0.5) / scale - 0.5;  // half_pixel
}

std::vector<double> coeffs(const ResizeAttrs& a, double r) {
  if (a.mode == ResizeMode::linear) return {1 - r, r};
  const double A = a.cubic_a, s = 1 - r;
  return {((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A,
          ((A + 2) * r - (A + 3)) * r * r + 1, ((A + 2) * s - (A + 3)) * s * s + 1,
          ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A};
}

ResizeAxis make_axis(const ResizeAttrs& a, int64_t in, int64_t out, double scale, double roi_s,
                     double roi_e) {
  ResizeAxis ax;
  ax.in = in;
  ax.out = out;
  ax.taps = a.mode == ResizeMode::nearest ? 1 : a.mode == ResizeMode::linear ? 2 : 4;
  ax.outside.assign(static_cast<size_t>(out), 0);
  bool identity = in == out;
  for (int64_t o = 0; o < out; ++o) {
    bool outside = false;
    const double x = source_coord(a, static_cast<double>(o), scale, in, roi_s, roi_e, outside);
    ax.outside[static_cast<size_t>(o)] = outside ? 1 : 0;
    identity = identity && !outside;
    // The neighbours ONNX's reference picks: base = ceil(x) - 1, ratio in (0, 1].
    const double fl = std::floor(x);
    const bool integral = x == fl;
    const auto base = static_cast<int64_t>(integral ? fl - 1 : fl);
    const double r = integral ? 1. : x - fl;
    auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
    if (a.mode == ResizeMode::nearest) {
      bool up = integral;
      if (!integral) {
        if (a.nearest == "round_prefer_floor") up = r > 0.5;
        else if (a.nearest == "round_prefer_ceil") up = r >= 0.5;
        else up = a.nearest == "ceil";
      }
      ax.idx.push_back(clamp(base + (up ? 1 : 0)));
      ax.weight.push_back(1.f);
      identity = identity && ax.idx.back() == o;
      continue;
    }
    std::vector<double> c = coeffs(a, r);
    const int64_t first = base - (ax.taps / 2 - 1);
    if (a.exclude_outside) {
      double sum = 0;
      for (int j = 0; j < ax.taps; ++j) {
        const int64_t i = first + j;
        if (i < 0 || i >= in) c[static_cast<size_t>(j)] = 0;
        sum += c[static_cast<size_t>(j)];
      }
      for (double& v : c) v /= sum;
    }
    for (int j = 0; j < ax.taps; ++j) {
      ax.idx.push_back(clamp(first + j));
      ax.weight.push_back(static_cast<float>(c[static_cast<size_t>(j)]));
      const bool self = ax.idx.back() == o;
      identity = identity && (self ? ax.weight.back() == 1.f : ax.weight.back() == 0.f);
    }
  }
  if (identity) {
    ax.taps = 0;
    ax.idx.clear();
    ax.weight.clear();
  }
  return ax;
}

}  // namespace

void check_resize_attrs(const Node& n) { resize_attrs(n); }

ResizeSpec resize_spec(const Node& n, const Shape& in, const std::vector<Tensor>& params) {
  const ResizeAttrs a = resize_attrs(n);
  const auto rank = static_cast<int64_t>(in.size());
  const std::vector<int64_t> axes = axes_of(n, a.axes, rank);
  const auto na = static_cast<int64_t>(axes.size());
  std::vector<double> scale(in.size(), 1.), roi_s(in.size(), 0.), roi_e(in.size(), 1.);
  Shape out = in;
  std::vector<float> scales;
  std::vector<int64_t> sizes;
  if (n.op == "Upsample" && n.attrs.has("scales")) {
    scales = n.attrs.get_floats("scales");
  } else if (legacy_form(n)) {
    DC_USER_CHECK(present(params, 1), "input 'scales' (input 1) is missing");
    scales = params[1].to_float_vector();
  } else {
    if (present(params, 2)) scales = params[2].to_float_vector();
    if (present(params, 3)) sizes = params[3].to_int64_vector();
    DC_USER_CHECK(scales.empty() != sizes.empty(),
                  "exactly one of 'scales' (input 2) and 'sizes' (input 3) must be given");
    if (a.coord == "tf_crop_and_resize") {
      DC_USER_CHECK(present(params, 1), "tf_crop_and_resize needs input 'roi' (input 1)");
      const std::vector<float> roi = params[1].to_float_vector();
      DC_USER_CHECK(static_cast<int64_t>(roi.size()) == 2 * na, "input 'roi' has ", roi.size(),
                    " values, expected ", 2 * na, " (start and end per resized axis)");
      for (int64_t i = 0; i < na; ++i) {
        roi_s[static_cast<size_t>(axes[i])] = roi[static_cast<size_t>(i)];
        roi_e[static_cast<size_t>(axes[i])] = roi[static_cast<size_t>(i + na)];
      }
    }
  }
  if (!scales.empty()) {
    DC_USER_CHECK(static_cast<int64_t>(scales.size()) == na, "'scales' has ", scales.size(),
                  " values, expected ", na, " (one per resized axis)");
    for (int64_t i = 0; i < na; ++i) {
      const auto d = static_cast<size_t>(axes[i]);
      DC_USER_CHECK(scales[static_cast<size_t>(i)] > 0, "'scales' values must be > 0, got ",
                    scales[static_cast<size_t>(i)]);
      scale[d] = scales[static_cast<size_t>(i)];
      out[d] = static_cast<int64_t>(scale[d] * static_cast<double>(in[d]));
    }
  } else {
    DC_USER_CHECK(static_cast<int64_t>(sizes.size()) == na, "'sizes' has ", sizes.size(),
                  " values, expected ", na, " (one per resized axis)");
    for (int64_t i = 0; i < na; ++i) {
      const auto d = static_cast<size_t>(axes[i]);
      DC_USER_CHECK(sizes[static_cast<size_t>(i)] > 0, "'sizes' values must be > 0, got ",
                    sizes[static_cast<size_t>(i)]);
      DC_USER_CHECK(in[d] > 0, "cannot resize the empty axis ", d);
      scale[d] = static_cast<double>(sizes[static_cast<size_t>(i)]) / static_cast<double>(in[d]);
      out[d] = sizes[static_cast<size_t>(i)];
    }
    if (a.aspect != "stretch") {  // one scale for every resized axis, then rounded sizes
      double s = a.aspect == "not_larger" ? 1e300 : 0.;
      for (int64_t ax : axes)
        s = a.aspect == "not_larger" ? std::min(s, scale[static_cast<size_t>(ax)])
                                     : std::max(s, scale[static_cast<size_t>(ax)]);
      for (int64_t ax : axes) {
        const auto d = static_cast<size_t>(ax);
        scale[d] = s;
        out[d] = static_cast<int64_t>(std::round(s * static_cast<double>(in[d])));
      }
    }
  }
  ResizeSpec spec;
  spec.extrapolation_value = a.extrapolation;
  spec.out_shape = out;
  for (size_t d = 0; d < in.size(); ++d) {
    DC_USER_CHECK(out[d] > 0 || in[d] == 0, "axis ", d, " of extent ", in[d],
                  " resizes to an empty axis (scale ", scale[d], ")");
    if (out[d] == 0 || in[d] == 0) {
      spec.axes.push_back({in[d], out[d], 0, {}, {}, {}});
      continue;
    }
    spec.axes.push_back(make_axis(a, in[d], out[d], scale[d], roi_s[d], roi_e[d]));
    for (char c : spec.axes.back().outside) spec.any_outside = spec.any_outside || c;
  }
  return spec;
}

}  // namespace dc::ref
