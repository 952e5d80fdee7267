// dc-bench-clblast OP SHAPE... [--device N] [--min-ms MS]: the peer of docs/bench/opencl.md on
// an OpenCL device: CLBlast (a tuned OpenCL BLAS) for GEMMs, convolutions as CLBlast's im2col
// + GEMM, and the epilogues dc fuses as separate OpenCL C kernels, timed like dc-worker times
// a variant (profiling events over all the pass's commands, warm-up, at least 10 samples and
// MS milliseconds, median; host_median_us: the host's wall time of a pass, CLBlast's enqueue
// and temporary buffers included). Prints one JSON line:
//   {"op": "gemm", "median_us": 123.4, "host_median_us": 130.2, "samples": 10, "flops": 2147483648}
//   gemm M N K                       C = A B (row-major)
//   gemm_bias_gelu M N K             C = gelu(A B + bias): GEMM, then a bias+GELU kernel
//   conv_bias_relu N C H W K R pad stride   im2col + GEMM per image, then a bias+ReLU kernel
//   residual_layernorm ROWS COLS     s = x + r (one kernel), LayerNorm of s (one group a row)
#include <clblast.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_catalog.h"
#include "ir/error.h"
#include "opencl_impl.h"

namespace dc {
namespace {

const char* kEpilogues = R"(
__kernel void bias_gelu(__global float* c, __global const float* bias, int n) {
  const size_t i = get_global_id(0);
  const float v = c[i] + bias[i % n];
  c[i] = 0.5f * v * (1.f + erf(v * 0.70710678118654752f));
}
__kernel void bias_relu(__global float* c, __global const float* bias, int hw, int k) {
  const size_t i = get_global_id(0);
  const float v = c[i] + bias[(i / hw) % k];
  c[i] = v > 0.f ? v : 0.f;
}
__kernel void add(__global const float* x, __global const float* r, __global float* s) {
  const size_t i = get_global_id(0);
  s[i] = x[i] + r[i];
}
__kernel void layernorm(__global const float* s, __global const float* g, __global const float* b,
                        __global float* y, int cols) {
  __local float part[64];
  const size_t row = get_group_id(0), t = get_local_id(0);
  __global const float* x = s + row * cols;
  float sum = 0.f;
  for (int j = t; j < cols; j += 64) sum += x[j];
  part[t] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int o = 32; o > 0; o >>= 1) { if (t < o) part[t] += part[t + o]; barrier(CLK_LOCAL_MEM_FENCE); }
  const float mean = part[0] / cols;
  barrier(CLK_LOCAL_MEM_FENCE);
  float sq = 0.f;
  for (int j = t; j < cols; j += 64) { const float d = x[j] - mean; sq += d * d; }
  part[t] = sq;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int o = 32; o > 0; o >>= 1) { if (t < o) part[t] += part[t + o]; barrier(CLK_LOCAL_MEM_FENCE); }
  const float inv = rsqrt(part[0] / cols + 1e-5f);
  for (int j = t; j < cols; j += 64) y[row * cols + j] = (x[j] - mean) * inv * g[j] + b[j];
}
)";

struct Bench {
  ocl::Device& dev;
  ocl::Program program;
  std::vector<ocl::Mem> keep;

  cl_command_queue q() { return dev.impl().queue.get(); }

  cl_mem buffer(size_t floats, uint32_t seed) {
    keep.push_back(ocl::create_buffer(dev, floats * 4));
    std::vector<float> v(floats);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    for (float& x : v) x = d(rng);
    ocl::check(clEnqueueWriteBuffer(q(), keep.back().get(), CL_TRUE, 0, floats * 4, v.data(), 0, nullptr, nullptr),
               "upload");
    return keep.back().get();
  }

  cl_kernel kernel(const char* name) {
    if (!program) {
      cl_int rc = CL_SUCCESS;
      program.reset(clCreateProgramWithSource(dev.impl().context.get(), 1, &kEpilogues, nullptr, &rc));
      ocl::check(rc, "clCreateProgramWithSource");
      ocl::check(clBuildProgram(program.get(), 1, &dev.impl().device, "", nullptr, nullptr), "clBuildProgram");
    }
    cl_int rc = CL_SUCCESS;
    cl_kernel k = clCreateKernel(program.get(), name, &rc);
    ocl::check(rc, "clCreateKernel");
    return k;
  }

  template <class... Args>
  void launch(cl_kernel k, size_t global, size_t local, std::vector<cl_event>* ev, Args... args) {
    cl_uint i = 0;
    (ocl::check(clSetKernelArg(k, i++, sizeof(args), &args), "clSetKernelArg"), ...);
    cl_event e = nullptr;
    ocl::check(clEnqueueNDRangeKernel(q(), k, 1, nullptr, &global, local ? &local : nullptr, 0, nullptr, &e), "enqueue");
    ev->push_back(e);
  }
};

void check_blast(clblast::StatusCode s, const char* what) {
  if (s != clblast::StatusCode::kSuccess) throw_user_error("CLBlast ", what, " failed with status ", static_cast<int>(s));
}

int run(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  int device = 0;
  double min_ms = 200;
  for (size_t i = 0; i + 1 < a.size();) {
    if (a[i] == "--device") device = std::stoi(a[i + 1]);
    else if (a[i] == "--min-ms") min_ms = std::stod(a[i + 1]);
    else {
      ++i;
      continue;
    }
    a.erase(a.begin() + static_cast<long>(i), a.begin() + static_cast<long>(i) + 2);
  }
  DC_USER_CHECK(!a.empty(), "usage: dc-bench-clblast OP SHAPE... [--device N] [--min-ms MS]");
  auto arg = [&](size_t i) -> size_t {
    DC_USER_CHECK(i < a.size(), "missing a shape argument for ", a[0]);
    return static_cast<size_t>(std::stoull(a[i]));
  };
  ocl::Device dev(GpuCatalog::builtin(), device);
  Bench b{dev, nullptr, {}};
  cl_command_queue q = b.q();
  std::function<void(std::vector<cl_event>*)> once;
  double flops = 0;
  const std::string op = a[0];
  if (op == "gemm" || op == "gemm_bias_gelu") {
    const size_t m = arg(1), n = arg(2), k = arg(3);
    cl_mem A = b.buffer(m * k, 1), B = b.buffer(k * n, 2), C = b.buffer(m * n, 3), bias = b.buffer(n, 4);
    cl_kernel epi = op == "gemm" ? nullptr : b.kernel("bias_gelu");
    flops = 2.0 * static_cast<double>(m * n * k);
    once = [=, &b](std::vector<cl_event>* ev) mutable {
      cl_event e = nullptr;
      check_blast(clblast::Gemm(clblast::Layout::kRowMajor, clblast::Transpose::kNo, clblast::Transpose::kNo, m, n, k,
                                1.f, A, 0, k, B, 0, n, 0.f, C, 0, n, &q, &e),
                  "Gemm");
      ev->push_back(e);
      if (epi) b.launch(epi, m * n, 0, ev, C, bias, static_cast<cl_int>(n));
    };
  } else if (op == "conv_bias_relu") {
    const size_t N = arg(1), C = arg(2), H = arg(3), W = arg(4), K = arg(5), R = arg(6), pad = arg(7), st = arg(8);
    const size_t OH = (H + 2 * pad - R) / st + 1, OW = (W + 2 * pad - R) / st + 1, CRS = C * R * R;
    cl_mem X = b.buffer(N * C * H * W, 1), Wt = b.buffer(K * CRS, 2), Y = b.buffer(N * K * OH * OW, 3),
           col = b.buffer(CRS * OH * OW, 4), bias = b.buffer(K, 5);
    cl_kernel epi = b.kernel("bias_relu");
    flops = 2.0 * static_cast<double>(N * K * OH * OW * CRS);
    once = [=, &b](std::vector<cl_event>* ev) mutable {
      for (size_t img = 0; img < N; ++img) {
        cl_event e = nullptr;
        check_blast(clblast::Im2col<float>(clblast::KernelMode::kCrossCorrelation, C, H, W, R, R, pad, pad, st, st, 1, 1,
                                           X, img * C * H * W, col, 0, &q, &e),
                    "Im2col");
        ev->push_back(e);
        check_blast(clblast::Gemm(clblast::Layout::kRowMajor, clblast::Transpose::kNo, clblast::Transpose::kNo, K,
                                  OH * OW, CRS, 1.f, Wt, 0, CRS, col, 0, OH * OW, 0.f, Y, img * K * OH * OW, OH * OW, &q, &e),
                    "Gemm");
        ev->push_back(e);
      }
      b.launch(epi, N * K * OH * OW, 0, ev, Y, bias, static_cast<cl_int>(OH * OW), static_cast<cl_int>(K));
    };
  } else if (op == "residual_layernorm") {
    const size_t rows = arg(1), cols = arg(2);
    cl_mem X = b.buffer(rows * cols, 1), R = b.buffer(rows * cols, 2), S = b.buffer(rows * cols, 3),
           Y = b.buffer(rows * cols, 4), g = b.buffer(cols, 5), be = b.buffer(cols, 6);
    cl_kernel add = b.kernel("add"), ln = b.kernel("layernorm");
    flops = 8.0 * static_cast<double>(rows * cols);
    once = [=, &b](std::vector<cl_event>* ev) mutable {
      b.launch(add, rows * cols, 0, ev, X, R, S);
      b.launch(ln, rows * 64, 64, ev, S, g, be, Y, static_cast<cl_int>(cols));
    };
  } else {
    throw_user_error("unknown op '", op, "' (gemm, gemm_bias_gelu, conv_bias_relu, residual_layernorm)");
  }
  // One sample: every command of one pass between two markers. The event CLBlast returns is
  // its last kernel's only (an indirect GEMM also pads or transposes its operands first), so
  // the first marker waits on a user event that opens only once the whole pass is enqueued:
  // the commands then run back to back, and the time runs from the first marker's end to the
  // last one's, without the host's enqueue (as dc-worker times a variant's launches).
  cl_context ctx = dev.impl().context.get();
  auto sample = [&](double* host_us) {
    cl_int rc = CL_SUCCESS;
    cl_event gate = clCreateUserEvent(ctx, &rc);
    ocl::check(rc, "clCreateUserEvent");
    cl_event begin = nullptr, end = nullptr;
    ocl::check(clEnqueueMarkerWithWaitList(q, 1, &gate, &begin), "clEnqueueMarkerWithWaitList");
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<cl_event> ev;
    once(&ev);
    ocl::check(clEnqueueMarkerWithWaitList(q, 0, nullptr, &end), "clEnqueueMarkerWithWaitList");
    ocl::check(clSetUserEventStatus(gate, CL_COMPLETE), "clSetUserEventStatus");
    ocl::check(clWaitForEvents(1, &end), "clWaitForEvents");
    *host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    cl_ulong opened = 0, closed = 0;
    ocl::check(clGetEventProfilingInfo(begin, CL_PROFILING_COMMAND_END, sizeof opened, &opened, nullptr), "profiling");
    ocl::check(clGetEventProfilingInfo(end, CL_PROFILING_COMMAND_END, sizeof closed, &closed, nullptr), "profiling");
    for (cl_event e : ev) clReleaseEvent(e);
    for (cl_event e : {gate, begin, end}) clReleaseEvent(e);
    return static_cast<double>(closed - opened) * 1e-3;
  };
  double host = 0;
  for (int i = 0; i < 3; ++i) sample(&host);
  std::vector<double> s, h;
  double total = 0;
  while (s.size() < 10 || total < min_ms * 1e3) {
    s.push_back(sample(&host));
    h.push_back(host);
    total += s.back();
  }
  std::sort(s.begin(), s.end());
  std::sort(h.begin(), h.end());
  std::cout << fmt::format(
      "{{\"op\": \"{}\", \"median_us\": {:.2f}, \"host_median_us\": {:.2f}, \"samples\": {}, \"flops\": {:.0f}}}\n",
      op, s[s.size() / 2], h[h.size() / 2], s.size(), flops);
  return 0;
}

}  // namespace
}  // namespace dc

int main(int argc, char** argv) {
  try {
    return dc::run(argc, argv);
  } catch (const dc::UserError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 3;
  }
}
