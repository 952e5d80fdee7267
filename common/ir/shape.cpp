#include "ir/shape.h"

#include "ir/error.h"

namespace dc {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::vector<int64_t> shape_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t i = static_cast<int64_t>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

std::string shape_str(const Shape& s) {
  if (s.empty()) return "scalar";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += 'x';
    out += std::to_string(s[i]);
  }
  return out;
}

int64_t normalize_axis(int64_t axis, int64_t rank, const char* what) {
  DC_USER_CHECK(axis >= -rank && axis < rank, what, ": axis ", axis, " is out of range for rank ",
                rank);
  return axis < 0 ? axis + rank : axis;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    DC_USER_CHECK(da == db || da == 1 || db == 1, "shapes ", shape_str(a), " and ", shape_str(b),
                  " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out) {
  DC_INTERNAL_CHECK(s.size() <= out.size(), "broadcast to lower rank");
  std::vector<int64_t> st(out.size(), 0);
  const auto own = shape_strides(s);
  const size_t off = out.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) st[i + off] = s[i] == 1 ? 0 : own[i];
  return st;
}

}  // namespace dc
