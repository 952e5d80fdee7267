// Elementwise kernels of the reference executor: arithmetic with numpy broadcasting,
// unary math and activations, comparisons and logic, Where, Clip and Cast.
//
// Floating tensors (f32, f64) are computed natively; the arithmetic ops also take i32 and
// i64 (wrapping like numpy, division truncating like C). Every kernel first runs its own
// import-time check on the actual inputs, so a kernel called directly (tests, constant
// folding) refuses what import would have refused.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "ir/parallel.h"
#include "ref/broadcast.h"
#include "ref/checked_op.h"
#include "ref/kernel.h"

namespace dc::ref {

namespace {

using Infos = std::vector<const TensorInfo*>;

// ---------------------------------------------------------------------------------------
// Checks shared by the kernels and the import-time validation.


constexpr std::initializer_list<DType> kArith = {DType::f32, DType::f64, DType::i32, DType::i64};
constexpr std::initializer_list<DType> kFloat = {DType::f32, DType::f64};
constexpr std::initializer_list<DType> kBool = {DType::boolean};
constexpr std::initializer_list<DType> kEquality = {DType::f32, DType::f64, DType::i32,
                                                    DType::i64, DType::boolean};

void require_dtype(const Node& n, const std::string& what, DType t,
                   std::initializer_list<DType> allowed) {
  for (DType a : allowed)
    if (a == t) return;
  std::string list;
  for (DType a : allowed) list += (list.empty() ? "" : ", ") + std::string(dtype_name(a));
  throw_user_error(n.op, ": ", what, " has dtype ", dtype_name(t),
                   ", which is not supported (supported: ", list, ")");
}

const TensorInfo& required(const Node& n, const Infos& in, size_t i) {
  DC_USER_CHECK(i < in.size() && in[i] != nullptr, n.op, ": required input ", i,
                " is missing");
  return *in[i];
}

void require_count(const Node& n, const Infos& in, size_t lo, size_t hi) {
  DC_USER_CHECK(in.size() >= lo && in.size() <= hi, n.op, ": expected ",
                lo == hi ? std::to_string(lo) : str_cat(lo, " to ", hi), " inputs, got ",
                in.size());
}

// Numpy broadcast of all present shapes, with the op named in the error.
Shape broadcast_all(const Node& n, const Infos& in) {
  Shape out;
  bool first = true;
  for (const TensorInfo* t : in) {
    if (t == nullptr) continue;
    try {
      out = first ? t->shape : broadcast_shapes(out, t->shape);
    } catch (const UserError& e) {
      throw_user_error(n.op, ": ", e.what());
    }
    first = false;
  }
  return out;
}

// lo..hi inputs, all present, of one dtype from `allowed`, broadcastable together.
void check_same_type_nary(const Node& n, const Infos& in, size_t lo, size_t hi,
                          std::initializer_list<DType> allowed) {
  require_count(n, in, lo, hi);
  const DType t = required(n, in, 0).dtype;
  require_dtype(n, "input 0", t, allowed);
  for (size_t i = 1; i < in.size(); ++i) {
    const TensorInfo& x = required(n, in, i);
    DC_USER_CHECK(x.dtype == t, n.op, ": input ", i, " has dtype ", dtype_name(x.dtype),
                  " but input 0 has ", dtype_name(t));
  }
  broadcast_all(n, in);
}

constexpr size_t kVariadic = 1 << 20;

void check_arith_binary(const Node& n, const Infos& in) { check_same_type_nary(n, in, 2, 2, kArith); }
void check_arith_variadic(const Node& n, const Infos& in) {
  check_same_type_nary(n, in, 1, kVariadic, kArith);
}
void check_equal(const Node& n, const Infos& in) { check_same_type_nary(n, in, 2, 2, kEquality); }
void check_logic_binary(const Node& n, const Infos& in) { check_same_type_nary(n, in, 2, 2, kBool); }
void check_not(const Node& n, const Infos& in) { check_same_type_nary(n, in, 1, 1, kBool); }
void check_unary_arith(const Node& n, const Infos& in) { check_same_type_nary(n, in, 1, 1, kArith); }
void check_unary_float(const Node& n, const Infos& in) {
  check_same_type_nary(n, in, 1, 1, kFloat);
  // Reading them validates the attribute types (an int where a float is due is accepted).
  if (n.op == "LeakyRelu") n.attrs.get_float("alpha", 0.01f);
  if (n.op == "HardSigmoid") {
    n.attrs.get_float("alpha", 0.2f);
    n.attrs.get_float("beta", 0.5f);
  }
}

void check_celu(const Node& n, const Infos& in) {
  check_same_type_nary(n, in, 1, 1, {DType::f32});
  DC_USER_CHECK(n.attrs.get_float("alpha", 1.f) != 0.f, n.op, ": attribute 'alpha' is 0");
}

// PRelu: the slope broadcasts to X (unidirectionally: the output has X's shape).
void check_prelu(const Node& n, const Infos& in) {
  check_same_type_nary(n, in, 2, 2, kFloat);
  DC_USER_CHECK(broadcast_all(n, in) == required(n, in, 0).shape, n.op, ": slope of shape ",
                shape_str(in[1]->shape), " does not broadcast to X's shape ",
                shape_str(in[0]->shape));
}

// Mod: fmod=0 (integers only: the remainder takes the divisor's sign, as Python's %) or
// fmod=1 (C's fmod / %: the dividend's sign).
void check_mod(const Node& n, const Infos& in) {
  check_same_type_nary(n, in, 2, 2, kArith);
  const int64_t fmod = n.attrs.get_int("fmod", 0);
  DC_USER_CHECK(fmod == 0 || fmod == 1, n.op, ": attribute 'fmod' must be 0 or 1, got ", fmod);
  DC_USER_CHECK(fmod == 1 || !is_float(in[0]->dtype), n.op,
                ": fmod=0 on floating-point inputs (the spec requires fmod=1)");
}

void check_is_special(const Node& n, const Infos& in) {
  check_same_type_nary(n, in, 1, 1, kFloat);
  if (n.op == "IsInf") {
    n.attrs.get_int("detect_positive", 1);
    n.attrs.get_int("detect_negative", 1);
  }
}

void check_gelu(const Node& n, const Infos& in) {
  check_same_type_nary(n, in, 1, 1, kFloat);
  const std::string a = n.attrs.get_string("approximate", "none");
  DC_USER_CHECK(a == "none" || a == "tanh", n.op, ": attribute 'approximate' is '", a,
                "'; allowed: 'none', 'tanh'");
}

void check_pow(const Node& n, const Infos& in) {
  require_count(n, in, 2, 2);
  require_dtype(n, "base (input 0)", required(n, in, 0).dtype, kArith);
  require_dtype(n, "exponent (input 1)", required(n, in, 1).dtype, kArith);
  broadcast_all(n, in);
}

void check_clip(const Node& n, const Infos& in) {
  require_count(n, in, 1, 3);
  const DType t = required(n, in, 0).dtype;
  require_dtype(n, "input 0", t, kArith);
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i] == nullptr) continue;
    const char* what = i == 1 ? "min" : "max";
    DC_USER_CHECK(!n.attrs.has(what), n.op, ": '", what,
                  "' is given both as an attribute and as an input");
    DC_USER_CHECK(in[i]->dtype == t, n.op, ": '", what, "' has dtype ", dtype_name(in[i]->dtype),
                  " but the input has ", dtype_name(t));
    DC_USER_CHECK(shape_numel(in[i]->shape) == 1, n.op, ": '", what,
                  "' must be a scalar, got shape ", shape_str(in[i]->shape));
  }
  n.attrs.get_float("min", 0.f);
  n.attrs.get_float("max", 0.f);
}

void check_where(const Node& n, const Infos& in) {
  require_count(n, in, 3, 3);
  require_dtype(n, "condition (input 0)", required(n, in, 0).dtype, kBool);
  const DType x = required(n, in, 1).dtype, y = required(n, in, 2).dtype;
  DC_USER_CHECK(x == y, n.op, ": X has dtype ", dtype_name(x), " but Y has ", dtype_name(y));
  broadcast_all(n, in);
}

std::optional<DType> cast_target(const Node& n) {
  const int64_t to = n.attrs.get_int("to");
  if (to < std::numeric_limits<int32_t>::min() || to > std::numeric_limits<int32_t>::max())
    return std::nullopt;
  return dtype_from_onnx(static_cast<int32_t>(to));
}

void check_cast(const Node& n, const Infos& in) {
  require_count(n, in, 1, 1);
  const DType from = required(n, in, 0).dtype;
  DC_USER_CHECK(from != DType::undefined, n.op, ": input has no dtype");
  const auto to = cast_target(n);
  DC_USER_CHECK(to.has_value(), n.op, ": attribute 'to' = ", n.attrs.get_int("to"), " (",
                onnx_dtype_name(static_cast<int32_t>(n.attrs.get_int("to"))),
                ") is not a dtype dc supports");
}

// ---------------------------------------------------------------------------------------
// Dispatch and loops.

template <class T>
struct Tag {
  using type = T;
};

template <class... Ts>
struct Types {};
using ArithTypes = Types<float, double, int32_t, int64_t>;
using FloatTypes = Types<float, double>;
using EqualityTypes = Types<float, double, int32_t, int64_t, bool>;

// Calls fn(Tag<T>{}) for the T of `Types` whose dtype is t; UserError naming the op if none.
template <class... Ts, class Fn>
Tensor visit_dtype(Types<Ts...>, const Node& n, DType t, Fn&& fn) {
  Tensor out;
  const bool hit = ((t == dtype_of<Ts>::value && (out = fn(Tag<Ts>{}), true)) || ...);
  if (!hit) require_dtype(n, "input", t, {dtype_of<Ts>::value...});
  return out;
}

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

template <class T, class R, class F>
Tensor unary_map(const Tensor& x, F f) {
  Tensor out(dtype_of<R>::value, x.shape());
  const T* in = x.data<T>();
  R* o = out.mutable_data<R>();
  parallel_for(x.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) o[i] = f(in[i]);
  });
  return out;
}

// out = f(a, b) with numpy broadcasting. The innermost run is specialised on the operand
// strides (both contiguous, or one of them repeated) so that the hot loops stay simple.
template <class A, class B, class R, class F>
Tensor binary_map(const Tensor& a, const Tensor& b, F f) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape());
  Tensor out(dtype_of<R>::value, shape);
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  R* po = out.mutable_data<R>();
  const int64_t n = out.numel();
  if (a.shape() == b.shape()) {
    parallel_for(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) po[i] = f(pa[i], pb[i]);
    });
    return out;
  }
  const auto loop = broadcast_loop<2>(shape, {&a.shape(), &b.shape()});
  const int64_t sa = loop.strides[0].back(), sb = loop.strides[1].back();
  parallel_for(n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    for_each_run(loop, lo, hi, [&](int64_t o, const std::array<int64_t, 2>& off, int64_t cnt) {
      const A* x = pa + off[0];
      const B* y = pb + off[1];
      R* z = po + o;
      if (sa == 1 && sb == 1) {
        for (int64_t j = 0; j < cnt; ++j) z[j] = f(x[j], y[j]);
      } else if (sa == 1 && sb == 0) {
        const B yv = *y;
        for (int64_t j = 0; j < cnt; ++j) z[j] = f(x[j], yv);
      } else if (sa == 0 && sb == 1) {
        const A xv = *x;
        for (int64_t j = 0; j < cnt; ++j) z[j] = f(xv, y[j]);
      } else {
        for (int64_t j = 0; j < cnt; ++j) z[j] = f(x[j * sa], y[j * sb]);
      }
    });
  });
  return out;
}

// ---------------------------------------------------------------------------------------
// Arithmetic: Add Sub Mul Div Max Min.

enum class Arith { add, sub, mul, div, max, min };

template <Arith K, class T>
T arith(T a, T b) {
  if constexpr (K == Arith::max) {
    return (a > b || is_nan(a)) ? a : b;  // NaN propagates, as numpy.maximum
  } else if constexpr (K == Arith::min) {
    return (a < b || is_nan(a)) ? a : b;
  } else if constexpr (std::is_integral_v<T>) {
    // Integers wrap like numpy; unsigned arithmetic keeps that defined in C++.
    using U = std::make_unsigned_t<T>;
    if constexpr (K == Arith::add) return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    else if constexpr (K == Arith::sub) return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
    else if constexpr (K == Arith::mul) return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    // Zero divisors are refused beforehand; -1 is special-cased since MIN / -1 traps.
    else return b == -1 ? static_cast<T>(U{0} - static_cast<U>(a)) : static_cast<T>(a / b);
  } else {
    if constexpr (K == Arith::add) return a + b;
    else if constexpr (K == Arith::sub) return a - b;
    else if constexpr (K == Arith::mul) return a * b;
    else return a / b;
  }
}

template <Arith K>
Tensor arith_pair(const Node& n, const Tensor& a, const Tensor& b) {
  return visit_dtype(ArithTypes{}, n, a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (K == Arith::div && std::is_integral_v<T>) {
      const T* p = b.data<T>();
      for (int64_t i = 0; i < b.numel(); ++i)
        DC_USER_CHECK(p[i] != 0, n.op, ": integer division by zero");
    }
    return binary_map<T, T, T>(a, b, [](T x, T y) { return arith<K>(x, y); });
  });
}

// Binary, or variadic folded left to right (Max, Min): pairwise numpy broadcasting of
// all inputs gives the same shape as broadcasting them together.
template <Arith K>
std::vector<Tensor> run_arith(const Node& n, const Inputs& in) {
  Tensor acc = in[0];
  for (size_t i = 1; i < in.size(); ++i) acc = arith_pair<K>(n, acc, in[i]);
  return {acc};
}

// Pow: the output has the base's dtype, whatever the exponent's.
template <class T, class S>
T float_to_int(S v) {
  if (std::isnan(v)) return 0;
  const double t = std::trunc(static_cast<double>(v));
  int64_t i;
  if (t >= 9223372036854775808.0) i = std::numeric_limits<int64_t>::max();
  else if (t < -9223372036854775808.0) i = std::numeric_limits<int64_t>::min();
  else i = static_cast<int64_t>(t);
  return static_cast<T>(i);  // narrower types wrap, as numpy's casts do
}

template <class A, class B>
A pow_elem(const Node& n, A x, B y) {
  if constexpr (std::is_integral_v<A> && std::is_integral_v<B>) {
    if (y < 0) {  // exact result truncated toward zero
      DC_USER_CHECK(x != 0, n.op, ": 0 raised to the negative power ", y);
      if (x == 1) return 1;
      if (x == -1) return (y % 2 == 0) ? 1 : -1;
      return 0;
    }
    using U = std::make_unsigned_t<A>;
    U r = 1, base = static_cast<U>(x);
    for (uint64_t e = static_cast<uint64_t>(y); e != 0; e >>= 1) {
      if (e & 1) r *= base;
      base *= base;
    }
    return static_cast<A>(r);
  } else if constexpr (std::is_integral_v<A>) {
    return float_to_int<A>(std::pow(static_cast<double>(x), static_cast<double>(y)));
  } else if constexpr (std::is_same_v<A, float> && std::is_same_v<B, float>) {
    return std::pow(x, y);
  } else {
    return static_cast<A>(std::pow(static_cast<double>(x), static_cast<double>(y)));
  }
}

std::vector<Tensor> run_pow(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const Tensor& y = in[1];
  return {visit_dtype(ArithTypes{}, n, x.dtype(), [&](auto base_tag) {
    using A = typename decltype(base_tag)::type;
    return visit_dtype(ArithTypes{}, n, y.dtype(), [&](auto exp_tag) {
      using B = typename decltype(exp_tag)::type;
      // x^2 (LayerNorm's variance before fusion) as a multiply: same result, much cheaper.
      if constexpr (std::is_floating_point_v<A> && std::is_same_v<A, B>)
        if (y.numel() == 1 && y.data<B>()[0] == B(2))
          return binary_map<A, B, A>(x, y, [](A a, B) { return a * a; });
      return binary_map<A, B, A>(x, y, [&n](A a, B b) { return pow_elem(n, a, b); });
    });
  })};
}

// ---------------------------------------------------------------------------------------
// Comparisons and logic.

enum class Cmp { eq, gt, lt, ge, le };

template <Cmp K>
std::vector<Tensor> run_compare(const Node& n, const Inputs& in) {
  return {visit_dtype(EqualityTypes{}, n, in[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return binary_map<T, T, bool>(in[0], in[1], [](T a, T b) {
      if constexpr (K == Cmp::eq) return a == b;
      else if constexpr (K == Cmp::gt) return a > b;
      else if constexpr (K == Cmp::lt) return a < b;
      else if constexpr (K == Cmp::ge) return a >= b;
      else return a <= b;
    });
  })};
}

void check_order_compare(const Node& n, const Infos& in) {
  check_same_type_nary(n, in, 2, 2, kArith);
}

enum class Logic { and_, or_, xor_ };

template <Logic K>
std::vector<Tensor> run_logic(const Node&, const Inputs& in) {
  return {binary_map<bool, bool, bool>(in[0], in[1], [](bool a, bool b) {
    if constexpr (K == Logic::and_) return a && b;
    else if constexpr (K == Logic::or_) return a || b;
    else return a != b;
  })};
}

std::vector<Tensor> run_not(const Node&, const Inputs& in) {
  return {unary_map<bool, bool>(in[0], [](bool a) { return !a; })};
}

// ---------------------------------------------------------------------------------------
// Unary math and activations.

enum class Un {
  sqrt, exp, log, neg, reciprocal, abs, erf, relu, leaky_relu, sigmoid, tanh,
  hard_sigmoid, hard_swish, gelu, gelu_tanh,
  // Activations and math of issue 14 (formulas of the ONNX spec; ValueEmitter the same).
  elu, selu, celu, softplus, softsign, mish, thresholded_relu, floor, ceil, round, sign, sin,
  cos
};

// max(x, 0) + log1p(exp(-|x|)): Softplus's log(exp(x) + 1) without the overflow of exp.
template <class T>
T softplus(T x) {
  return (x > T(0) ? x : T(0)) + std::log1p(std::exp(-std::fabs(x)));
}

template <Un K, class T>
T unary(T x, T alpha, T beta) {
  if constexpr (K == Un::neg) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(std::make_unsigned_t<T>{0} - static_cast<std::make_unsigned_t<T>>(x));
    else return -x;
  } else if constexpr (K == Un::abs) {
    if constexpr (std::is_integral_v<T>)
      return x < 0 ? unary<Un::neg>(x, alpha, beta) : x;
    else return std::fabs(x);
  } else if constexpr (K == Un::relu) {
    return x < T(0) ? T(0) : x;  // NaN stays NaN
  } else if constexpr (K == Un::sqrt) {
    return std::sqrt(x);
  } else if constexpr (K == Un::exp) {
    return std::exp(x);
  } else if constexpr (K == Un::log) {
    return std::log(x);
  } else if constexpr (K == Un::reciprocal) {
    return T(1) / x;
  } else if constexpr (K == Un::erf) {
    return std::erf(x);
  } else if constexpr (K == Un::leaky_relu) {
    return x < T(0) ? alpha * x : x;
  } else if constexpr (K == Un::sigmoid) {
    return T(1) / (T(1) + std::exp(-x));
  } else if constexpr (K == Un::tanh) {
    return std::tanh(x);
  } else if constexpr (K == Un::hard_sigmoid) {
    return std::max(T(0), std::min(T(1), alpha * x + beta));
  } else if constexpr (K == Un::hard_swish) {
    return x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5)));
  } else if constexpr (K == Un::elu) {
    return x < T(0) ? alpha * (std::exp(x) - T(1)) : x;
  } else if constexpr (K == Un::selu) {  // alpha, gamma
    return x <= T(0) ? beta * (alpha * std::exp(x) - alpha) : beta * x;
  } else if constexpr (K == Un::celu) {  // max(0,x) + min(0, alpha*(exp(x/alpha)-1))
    return x > T(0) ? x : alpha * (std::exp(x / alpha) - T(1));
  } else if constexpr (K == Un::softplus) {
    return softplus(x);
  } else if constexpr (K == Un::softsign) {
    return x / (T(1) + std::fabs(x));
  } else if constexpr (K == Un::mish) {
    return x * std::tanh(softplus(x));
  } else if constexpr (K == Un::thresholded_relu) {
    return x > alpha ? x : T(0);
  } else if constexpr (K == Un::floor) {
    return std::floor(x);
  } else if constexpr (K == Un::ceil) {
    return std::ceil(x);
  } else if constexpr (K == Un::round) {
    return std::nearbyint(x);  // half to even (the default rounding mode)
  } else if constexpr (K == Un::sign) {
    if constexpr (std::is_integral_v<T>) return static_cast<T>((x > 0) - (x < 0));
    else return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x);  // 0 and NaN stay
  } else if constexpr (K == Un::sin) {
    return std::sin(x);
  } else if constexpr (K == Un::cos) {
    return std::cos(x);
  } else if constexpr (K == Un::gelu) {
    return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
  } else {
    static_assert(K == Un::gelu_tanh);
    const T c = T(0.79788456080286535588);  // sqrt(2/pi)
    return T(0.5) * x * (T(1) + std::tanh(c * (x + T(0.044715) * x * x * x)));
  }
}

// The (alpha, beta) attributes of an activation, with ONNX's defaults (Selu: alpha, gamma).
template <Un K>
std::pair<float, float> unary_params(const Node& n) {
  const auto alpha = [&](float d) { return n.attrs.get_float("alpha", d); };
  switch (K) {
    case Un::leaky_relu: return {alpha(0.01f), 0.f};
    case Un::hard_sigmoid: return {alpha(0.2f), n.attrs.get_float("beta", 0.5f)};
    case Un::elu: case Un::celu: case Un::thresholded_relu: return {alpha(1.f), 0.f};
    case Un::selu:
      return {alpha(1.67326319217681884765625f), n.attrs.get_float("gamma", 1.05070102214813232421875f)};
    default: return {0.f, 0.f};
  }
}

template <Un K>
Tensor unary_kernel(const Node& n, const Tensor& x) {
  constexpr bool any_arith = K == Un::neg || K == Un::abs || K == Un::relu || K == Un::sign;
  const auto [alpha, beta] = unary_params<K>(n);
  using Allowed = std::conditional_t<any_arith, ArithTypes, FloatTypes>;
  return visit_dtype(Allowed{}, n, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T a = static_cast<T>(alpha), b = static_cast<T>(beta);
    return unary_map<T, T>(x, [a, b](T v) { return unary<K>(v, a, b); });
  });
}

template <Un K>
std::vector<Tensor> run_unary(const Node& n, const Inputs& in) {
  return {unary_kernel<K>(n, in[0])};
}

std::vector<Tensor> run_gelu(const Node& n, const Inputs& in) {
  if (n.attrs.get_string("approximate", "none") == "tanh")
    return {unary_kernel<Un::gelu_tanh>(n, in[0])};
  return {unary_kernel<Un::gelu>(n, in[0])};
}

std::vector<Tensor> run_prelu(const Node& n, const Inputs& in) {
  return {visit_dtype(FloatTypes{}, n, in[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return binary_map<T, T, T>(in[0], in[1], [](T x, T slope) { return x < T(0) ? slope * x : x; });
  })};
}

template <class T>
T mod_elem(T a, T b, bool c_fmod) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::fmod(a, b);
  } else {
    if (b == -1) return 0;  // MIN % -1 traps
    const T r = a % b;
    return (!c_fmod && r != 0 && ((r < 0) != (b < 0))) ? static_cast<T>(r + b) : r;
  }
}

std::vector<Tensor> run_mod(const Node& n, const Inputs& in) {
  const bool c_fmod = n.attrs.get_int("fmod", 0) == 1;
  return {visit_dtype(ArithTypes{}, n, in[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {  // refused before the (parallel) loop
      const T* p = in[1].data<T>();
      for (int64_t i = 0; i < in[1].numel(); ++i)
        DC_USER_CHECK(p[i] != 0, n.op, ": integer modulo by zero");
    }
    return binary_map<T, T, T>(in[0], in[1], [c_fmod](T a, T b) { return mod_elem(a, b, c_fmod); });
  })};
}

std::vector<Tensor> run_is_nan(const Node& n, const Inputs& in) {
  return {visit_dtype(FloatTypes{}, n, in[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return unary_map<T, bool>(in[0], [](T x) { return x != x; });
  })};
}

std::vector<Tensor> run_is_inf(const Node& n, const Inputs& in) {
  const bool pos = n.attrs.get_int("detect_positive", 1) != 0;
  const bool neg = n.attrs.get_int("detect_negative", 1) != 0;
  return {visit_dtype(FloatTypes{}, n, in[0].dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T inf = std::numeric_limits<T>::infinity();
    return unary_map<T, bool>(in[0], [=](T x) { return (pos && x == inf) || (neg && x == -inf); });
  })};
}

// ---------------------------------------------------------------------------------------
// Clip: bounds as attributes (opset < 11) or optional scalar inputs; either may be absent.

std::vector<Tensor> run_clip(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  return {visit_dtype(ArithTypes{}, n, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Lim = std::numeric_limits<T>;
    T lo = Lim::has_infinity ? -Lim::infinity() : Lim::lowest();
    T hi = Lim::has_infinity ? Lim::infinity() : Lim::max();
    if (n.attrs.has("min")) lo = static_cast<T>(n.attrs.get_float("min"));
    if (n.attrs.has("max")) hi = static_cast<T>(n.attrs.get_float("max"));
    if (in.size() > 1 && in[1].defined()) lo = in[1].data<T>()[0];
    if (in.size() > 2 && in[2].defined()) hi = in[2].data<T>()[0];
    // min > max clips everything to max, as ONNX and numpy do; NaN passes through.
    return unary_map<T, T>(x, [lo, hi](T v) {
      const T w = v < lo ? lo : v;
      return w > hi ? hi : w;
    });
  })};
}

// ---------------------------------------------------------------------------------------
// Where: pure data movement for X and Y, so it runs on element bytes of any dtype.

template <class E>
Tensor where_typed(const Tensor& c, const Tensor& x, const Tensor& y) {
  const Shape shape = broadcast_shapes(broadcast_shapes(c.shape(), x.shape()), y.shape());
  Tensor out(x.dtype(), shape);
  const bool* pc = c.data<bool>();
  const E* px = reinterpret_cast<const E*>(x.raw());
  const E* py = reinterpret_cast<const E*>(y.raw());
  E* po = reinterpret_cast<E*>(out.raw_mutable());
  const auto loop = broadcast_loop<3>(shape, {&c.shape(), &x.shape(), &y.shape()});
  const int64_t sc = loop.strides[0].back(), sx = loop.strides[1].back(),
                sy = loop.strides[2].back();
  parallel_for(out.numel(), kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    for_each_run(loop, lo, hi, [&](int64_t o, const std::array<int64_t, 3>& off, int64_t cnt) {
      const bool* cc = pc + off[0];
      const E* xx = px + off[1];
      const E* yy = py + off[2];
      E* z = po + o;
      if (sc == 1 && sx == 1 && sy == 1) {
        for (int64_t j = 0; j < cnt; ++j) z[j] = cc[j] ? xx[j] : yy[j];
      } else {
        for (int64_t j = 0; j < cnt; ++j) z[j] = cc[j * sc] ? xx[j * sx] : yy[j * sy];
      }
    });
  });
  return out;
}

std::vector<Tensor> run_where(const Node& n, const Inputs& in) {
  switch (dtype_size(in[1].dtype())) {
    case 1: return {where_typed<uint8_t>(in[0], in[1], in[2])};
    case 2: return {where_typed<uint16_t>(in[0], in[1], in[2])};
    case 4: return {where_typed<uint32_t>(in[0], in[1], in[2])};
    case 8: return {where_typed<uint64_t>(in[0], in[1], in[2])};
    default: throw_user_error(n.op, ": dtype ", dtype_name(in[1].dtype()), " is not supported");
  }
}

// ---------------------------------------------------------------------------------------
// Cast between every dtype dc holds. Float to integer truncates toward zero (NaN gives 0,
// values beyond int64 saturate, narrower integers then wrap as numpy's casts do).

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

template <class Fn>
Tensor visit_any(const Node& n, DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(Tag<float>{});
    case DType::f64: return fn(Tag<double>{});
    case DType::f16: return fn(Tag<Half>{});
    case DType::bf16: return fn(Tag<BFloat16>{});
    case DType::i8: return fn(Tag<int8_t>{});
    case DType::u8: return fn(Tag<uint8_t>{});
    case DType::i16: return fn(Tag<int16_t>{});
    case DType::u16: return fn(Tag<uint16_t>{});
    case DType::i32: return fn(Tag<int32_t>{});
    case DType::u32: return fn(Tag<uint32_t>{});
    case DType::i64: return fn(Tag<int64_t>{});
    case DType::u64: return fn(Tag<uint64_t>{});
    case DType::boolean: return fn(Tag<bool>{});
    default: throw_user_error(n.op, ": dtype ", dtype_name(t), " is not supported");
  }
}

template <class D, class S>
D convert(S v) {
  if constexpr (std::is_same_v<S, Half>) {
    return convert<D>(half_to_float(v.bits));
  } else if constexpr (std::is_same_v<S, BFloat16>) {
    return convert<D>(bf16_to_float(v.bits));
  } else if constexpr (std::is_same_v<D, Half>) {
    return Half{float_to_half(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<D, BFloat16>) {
    return BFloat16{float_to_bf16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != S(0);
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<S>) {
    if constexpr (std::is_same_v<D, uint64_t>)  // beyond int64 but within uint64
      if (v >= S(9223372036854775808.0) && v < S(18446744073709551616.0))
        return static_cast<uint64_t>(v);
    return float_to_int<D>(v);
  } else {
    return static_cast<D>(v);
  }
}

std::vector<Tensor> run_cast(const Node& n, const Inputs& in) {
  const Tensor& x = in[0];
  const DType to = *cast_target(n);
  if (to == x.dtype()) return {x};
  return {visit_any(n, x.dtype(), [&](auto src_tag) {
    using S = typename decltype(src_tag)::type;
    return visit_any(n, to, [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      Tensor out(to, x.shape());
      const S* src = reinterpret_cast<const S*>(x.raw());
      D* dst = reinterpret_cast<D*>(out.raw_mutable());
      parallel_for(x.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = convert<D>(src[i]);
      });
      return out;
    });
  })};
}

// ---------------------------------------------------------------------------------------

const OpDef kOps[] = {
    op_def<check_arith_binary, run_arith<Arith::add>>("Add"),
    op_def<check_arith_binary, run_arith<Arith::sub>>("Sub"),
    op_def<check_arith_binary, run_arith<Arith::mul>>("Mul"),
    op_def<check_arith_binary, run_arith<Arith::div>>("Div"),
    op_def<check_arith_variadic, run_arith<Arith::max>>("Max"),
    op_def<check_arith_variadic, run_arith<Arith::min>>("Min"),
    op_def<check_pow, run_pow>("Pow"),
    op_def<check_unary_float, run_unary<Un::sqrt>>("Sqrt"),
    op_def<check_unary_float, run_unary<Un::exp>>("Exp"),
    op_def<check_unary_float, run_unary<Un::log>>("Log"),
    op_def<check_unary_arith, run_unary<Un::neg>>("Neg"),
    op_def<check_unary_float, run_unary<Un::reciprocal>>("Reciprocal"),
    op_def<check_unary_arith, run_unary<Un::abs>>("Abs"),
    op_def<check_unary_float, run_unary<Un::erf>>("Erf"),
    op_def<check_unary_arith, run_unary<Un::relu>>("Relu"),
    op_def<check_unary_float, run_unary<Un::leaky_relu>>("LeakyRelu"),
    op_def<check_unary_float, run_unary<Un::sigmoid>>("Sigmoid"),
    op_def<check_unary_float, run_unary<Un::tanh>>("Tanh"),
    op_def<check_unary_float, run_unary<Un::hard_sigmoid>>("HardSigmoid"),
    op_def<check_unary_float, run_unary<Un::hard_swish>>("HardSwish"),
    op_def<check_gelu, run_gelu>("Gelu"),
    op_def<check_unary_float, run_unary<Un::elu>>("Elu"),
    op_def<check_unary_float, run_unary<Un::selu>>("Selu"),
    op_def<check_celu, run_unary<Un::celu>>("Celu"),
    op_def<check_unary_float, run_unary<Un::softplus>>("Softplus"),
    op_def<check_unary_float, run_unary<Un::softsign>>("Softsign"),
    op_def<check_unary_float, run_unary<Un::mish>>("Mish"),
    op_def<check_unary_float, run_unary<Un::thresholded_relu>>("ThresholdedRelu"),
    op_def<check_unary_float, run_unary<Un::floor>>("Floor"),
    op_def<check_unary_float, run_unary<Un::ceil>>("Ceil"),
    op_def<check_unary_float, run_unary<Un::round>>("Round"),
    op_def<check_unary_arith, run_unary<Un::sign>>("Sign"),
    op_def<check_unary_float, run_unary<Un::sin>>("Sin"),
    op_def<check_unary_float, run_unary<Un::cos>>("Cos"),
    op_def<check_prelu, run_prelu>("PRelu"),
    op_def<check_mod, run_mod>("Mod"),
    op_def<check_is_special, run_is_nan>("IsNaN"),
    op_def<check_is_special, run_is_inf>("IsInf"),
    op_def<check_clip, run_clip>("Clip"),
    op_def<check_equal, run_compare<Cmp::eq>>("Equal"),
    op_def<check_order_compare, run_compare<Cmp::gt>>("Greater"),
    op_def<check_order_compare, run_compare<Cmp::lt>>("Less"),
    op_def<check_order_compare, run_compare<Cmp::ge>>("GreaterOrEqual"),
    op_def<check_order_compare, run_compare<Cmp::le>>("LessOrEqual"),
    op_def<check_not, run_not>("Not"),
    op_def<check_logic_binary, run_logic<Logic::and_>>("And"),
    op_def<check_logic_binary, run_logic<Logic::or_>>("Or"),
    op_def<check_logic_binary, run_logic<Logic::xor_>>("Xor"),
    op_def<check_where, run_where>("Where"),
    op_def<check_cast, run_cast>("Cast"),
};

}  // namespace

std::span<const OpDef> elementwise_ops() { return kOps; }

}  // namespace dc::ref
