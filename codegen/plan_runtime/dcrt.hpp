// C++ wrapper over libdcrt's C API (dcrt.h), header-only: dcrt::Plan owns a dcrt_plan
// (RAII, movable), every failure is a dcrt::Error carrying the status and the message.
//
//   dcrt::Plan plan("tuned/h100");
//   plan.set_input(0, image);                        // std::vector<float>, exact size
//   plan.run();
//   std::vector<float> logits = plan.output<float>(0);
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dcrt.h"

namespace dcrt {

class Error : public std::runtime_error {
 public:
  Error(dcrt_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  dcrt_status status() const { return status_; }

 private:
  dcrt_status status_;
};

inline void check(dcrt_status status) {
  if (status != DCRT_OK) {
    const std::string message = dcrt_last_error();
    throw Error(status, message.empty() ? dcrt_status_name(status) : message);
  }
}

struct Options {
  bool emulate = false;   // the host emulator instead of a GPU
  int device = 0;         // CUDA device ordinal
  std::string cache_dir;  // "" = the default compile cache
};

struct TensorInfo {
  std::string name;
  std::string dtype;  // "f32", "i64", ...
  std::vector<int64_t> dims;
  size_t bytes = 0;
};

class Plan {
 public:
  explicit Plan(const std::string& dir, const Options& options = {}) {
    dcrt_options o = dcrt_default_options();
    o.emulate = options.emulate ? 1 : 0;
    o.device = options.device;
    o.cache_dir = options.cache_dir.empty() ? nullptr : options.cache_dir.c_str();
    check(dcrt_load(dir.c_str(), &o, &plan_));
  }
  Plan(Plan&& other) noexcept : plan_(std::exchange(other.plan_, nullptr)) {}
  Plan& operator=(Plan&& other) noexcept {
    if (this != &other) {
      dcrt_free(plan_);
      plan_ = std::exchange(other.plan_, nullptr);
    }
    return *this;
  }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() { dcrt_free(plan_); }

  size_t num_inputs() const {
    size_t n = 0;
    check(dcrt_num_inputs(plan_, &n));
    return n;
  }
  size_t num_outputs() const {
    size_t n = 0;
    check(dcrt_num_outputs(plan_, &n));
    return n;
  }
  TensorInfo input_info(size_t index) const { return info(dcrt_input_info, index); }
  TensorInfo output_info(size_t index) const { return info(dcrt_output_info, index); }

  void set_input(size_t index, const void* data, size_t bytes) {
    check(dcrt_set_input(plan_, index, data, bytes));
  }
  template <class T>
  void set_input(size_t index, const std::vector<T>& values) {
    set_input(index, values.data(), values.size() * sizeof(T));
  }

  void run() { check(dcrt_run(plan_)); }

  void get_output(size_t index, void* data, size_t bytes) const {
    check(dcrt_get_output(plan_, index, data, bytes));
  }
  // Output `index` as elements of T (sizeof(T) must divide the output's bytes).
  template <class T>
  std::vector<T> output(size_t index) const {
    const size_t bytes = output_info(index).bytes;
    if (bytes % sizeof(T) != 0)
      throw Error(DCRT_ERROR_INVALID_ARGUMENT, "output " + std::to_string(index) + " has " +
                                                   std::to_string(bytes) +
                                                   " bytes, not a whole number of elements");
    std::vector<T> values(bytes / sizeof(T));
    get_output(index, values.data(), bytes);
    return values;
  }

  // Latency samples in microseconds (GPU only).
  std::vector<double> time_runs(int warmup, int runs) {
    std::vector<double> samples(runs > 0 ? static_cast<size_t>(runs) : 0);
    check(dcrt_time_runs(plan_, warmup, runs, samples.data()));
    return samples;
  }

  std::string device_description() const {
    const char* d = nullptr;
    check(dcrt_device_description(plan_, &d));
    return d;
  }
  std::vector<std::string> warnings() const {
    size_t n = 0;
    check(dcrt_num_warnings(plan_, &n));
    std::vector<std::string> w;
    for (size_t i = 0; i < n; ++i) {
      const char* message = nullptr;
      check(dcrt_warning(plan_, i, &message));
      w.emplace_back(message);
    }
    return w;
  }

  dcrt_plan* get() const { return plan_; }

 private:
  using InfoFn = dcrt_status (*)(const dcrt_plan*, size_t, dcrt_tensor_info*);
  TensorInfo info(InfoFn fn, size_t index) const {
    dcrt_tensor_info i{};
    check(fn(plan_, index, &i));
    return TensorInfo{i.name, i.dtype, std::vector<int64_t>(i.dims, i.dims + i.rank), i.bytes};
  }

  dcrt_plan* plan_ = nullptr;
};

}  // namespace dcrt
