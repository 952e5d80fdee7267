#include "farm_inprocess.h"


#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "emulator.h"
#include "gpu_catalog.h"
#include "ir/error.h"
#include "ir/workload.h"
#include "nvrtc.h"
#include "ref/compare.h"
#include "variant.h"

namespace dc {

namespace {

uint64_t hash64(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Seeded inputs from the kernel's buffer descriptions (the in-process farm has no workload
// graph): floats uniform in [-1, 1), integers 0 (a valid index for any Gather), bools 0/1.
std::map<std::string, Tensor> inputs_for(const GeneratedKernel& k, uint64_t seed) {
  std::map<std::string, Tensor> out;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (const auto& b : k.buffers) {
    if (b.role != BufferRole::input) continue;
    Tensor t(b.dtype, b.shape);
    if (b.dtype == DType::f32) {
      float* p = t.mutable_data<float>();
      for (int64_t i = 0; i < t.numel(); ++i)
        p[i] = static_cast<float>(rng() >> 8) * (2.0f / 16777216.0f) - 1.0f;
    } else if (b.dtype == DType::boolean) {
      bool* p = t.mutable_data<bool>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = (rng() & 1u) != 0;
    }
    out[b.name] = std::move(t);
  }
  return out;
}

struct EmulatedRun {
  EmulatorResult result;
  std::map<std::string, Tensor> outputs;
};

EmulatedRun run_emulated(const GeneratedKernel& k, const std::map<std::string, Tensor>& inputs) {
  std::vector<Tensor> buffers(k.buffers.size());
  for (size_t i = 0; i < k.buffers.size(); ++i)
    if (k.buffers[i].role == BufferRole::input) buffers[i] = inputs.at(k.buffers[i].name);
  EmulatedRun run;
  run.result = emulate(k, buffers);
  for (size_t i = 0; i < k.buffers.size(); ++i)
    if (k.buffers[i].role == BufferRole::output) run.outputs[k.buffers[i].name] = buffers[i];
  return run;
}

// Variant and reference on the same inputs, every output compared.
void check_on_emulator(const FarmJob& job, Measurement& m) {
  const auto inputs = inputs_for(job.variant, job.seed);
  const EmulatedRun ref = run_emulated(job.reference, inputs);
  if (!ref.result.ok) {
    m.status = JobStatus::runtime_fault;
    m.error = "reference kernel: " + ref.result.error;
    return;
  }
  const EmulatedRun var = run_emulated(job.variant, inputs);
  if (!var.result.ok) {
    m.status = var.result.error.rfind("host compiler failed", 0) == 0 ? JobStatus::compile_error
                                                                       : JobStatus::runtime_fault;
    m.error = var.result.error;
    return;
  }
  for (const auto& [name, expected] : ref.outputs) {
    const auto it = var.outputs.find(name);
    if (it == var.outputs.end()) continue;
    const auto c = ref::compare_tensors(it->second, expected, job.rtol, 1e-7);
    m.max_rel_error = std::max(m.max_rel_error, c.rel_l2_error);
    if (!c.pass) {
      m.status = JobStatus::wrong_result;
      m.error = fmt::format("output {}: relative L2 error {:.3g} > {:.3g}{}{}", name,
                            c.rel_l2_error, job.rtol, c.problem.empty() ? "" : "; ", c.problem);
    }
  }
}

class InProcessFarm final : public Farm {
 public:
  explicit InProcessFarm(InProcessFarmOptions o) : opts_(std::move(o)) {
    DC_INTERNAL_CHECK(opts_.workers_per_type >= 1, "in-process farm: workers_per_type < 1");
    const GpuCatalog catalog = GpuCatalog::builtin();
    for (const auto& type : opts_.gpu_types) {
      const GpuSpec* spec = catalog.find(type);
      archs_[type] = spec ? spec->sm_arch() : "";
      queues_[type];
      for (int i = 0; i < opts_.workers_per_type; ++i)
        threads_.emplace_back([this, type, i] { serve(type, fmt::format("{}/{}-{}", opts_.host, type, i)); });
    }
  }
  ~InProcessFarm() override { shutdown(); }

  void submit(FarmJob job) override {
    std::lock_guard lock(mu_);
    DC_INTERNAL_CHECK(!stopping_, "in-process farm: submit after shutdown");
    const auto it = queues_.find(job.gpu_type);
    DC_INTERNAL_CHECK(it != queues_.end(), "in-process farm has no worker of type '",
                      job.gpu_type, "'");
    it->second.push_back(std::move(job));
    ++queued_;
    work_cv_.notify_all();
  }

  std::vector<Measurement> collect(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    const bool crash = opts_.throw_after_results >= 0;
    if (crash && returned_ >= opts_.throw_after_results)
      throw std::runtime_error(fmt::format("in-process farm: simulated crash after {} results",
                                           returned_));
    done_cv_.wait_for(lock, timeout, [&] { return !results_.empty(); });
    std::vector<Measurement> out;
    while (!results_.empty() && !(crash && returned_ >= opts_.throw_after_results)) {
      out.push_back(std::move(results_.front()));
      results_.pop_front();
      ++returned_;
    }
    return out;
  }

  FarmStatus status() const override {
    std::lock_guard lock(mu_);
    FarmStatus s;
    if (!stopping_) {
      for (const auto& type : opts_.gpu_types) {
        s.workers_per_gpu_type[type] = opts_.workers_per_type;
        s.emulated_workers_per_gpu_type[type] = opts_.workers_per_type;
      }
    }
    s.queued = queued_;
    s.in_flight = in_flight_;
    s.done = done_;
    return s;
  }

  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      work_cv_.notify_all();
    }
    for (auto& t : threads_) t.join();
  }

 private:
  void serve(const std::string& type, const std::string& worker) {
    while (true) {
      FarmJob job;
      {
        std::unique_lock lock(mu_);
        auto& q = queues_[type];
        work_cv_.wait(lock, [&] { return stopping_ || !q.empty(); });
        if (stopping_) return;
        job = std::move(q.front());
        q.pop_front();
        --queued_;
        ++in_flight_;
      }
      const auto t0 = std::chrono::steady_clock::now();
      Measurement m = run(job, worker);
      std::this_thread::sleep_until(t0 + opts_.job_delay);
      std::lock_guard lock(mu_);
      // The job's identity in the DB includes the finished time: unique per farm.
      last_ms_ = std::max(unix_ms_now(), last_ms_ + 1);
      m.finished_unix_ms = last_ms_;
      --in_flight_;
      ++done_;
      results_.push_back(std::move(m));
      done_cv_.notify_all();
    }
  }

  Measurement run(const FarmJob& job, const std::string& worker) const {
    Measurement m;
    m.workload = job.workload;
    m.variant_key = job.variant.variant_key;
    m.source_hash = fnv1a_hex(job.variant.source);
    m.gpu_type = job.gpu_type;
    m.worker = worker;
    m.estimate_us = job.estimate_us;
    m.nvrtc_version = nvrtc_version();
    m.driver_version = "in-process";
    m.emulated = true;
    try {
      if (opts_.compile) {
        const std::string& arch = archs_.at(job.gpu_type);
        if (arch.empty()) {
          m.status = JobStatus::unsupported;
          m.error = "unknown GPU type " + job.gpu_type;
          return m;
        }
        const CompileResult c = compile_cuda(job.variant.source, arch);
        m.compile_seconds = c.compile_seconds;
        if (!c.ok) {
          m.status = JobStatus::compile_error;
          m.error = c.error;
          return m;
        }
        for (const auto& r : c.kernels) {
          m.registers = std::max(m.registers, r.registers);
          m.spill_bytes = std::max(m.spill_bytes, r.spill_stores_bytes);
          m.smem_bytes = std::max(m.smem_bytes, r.static_smem_bytes);
        }
      }
      if (opts_.emulator_check && job.check_on_emulator) {
        check_on_emulator(job, m);
        if (m.status != JobStatus::ok) return m;
      }
      FakeOutcome o = opts_.timing ? opts_.timing(job) : FakeOutcome{};
      m.status = o.status;
      m.error = o.error;
      if (o.status == JobStatus::ok) {
        m.samples_us = o.samples_us.empty() ? modelled_samples(job) : std::move(o.samples_us);
        summarize_samples(m);
      }
    } catch (const std::exception& e) {
      // A failed job is a result, never a reason to stop serving.
      m.status = JobStatus::runtime_fault;
      m.error = std::string("in-process worker: ") + e.what();
      m.samples_us.clear();
    }
    return m;
  }

  const InProcessFarmOptions opts_;
  std::map<std::string, std::string> archs_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::map<std::string, std::deque<FarmJob>> queues_;
  std::deque<Measurement> results_;
  bool stopping_ = false;
  int64_t queued_ = 0, in_flight_ = 0, done_ = 0, returned_ = 0;
  int64_t last_ms_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace

std::vector<double> modelled_samples(const FarmJob& job) {
  const uint64_t h = hash64(job.variant.variant_key + "@" + job.gpu_type + "#" + job.workload);
  const double factor = 0.8 + 0.6 * static_cast<double>(h % 10000) / 10000.0;
  // The reference kernel has no estimate: model it as a naive kernel (about 10 GFLOP/s and
  // 100 GB/s), so that it is the slow baseline it is on a GPU.
  const double naive_us = 2.0 + static_cast<double>(job.flops) / 1e4 + static_cast<double>(job.bytes) / 1e5;
  const double base =
      (is_reference_key(job.variant.variant_key) ? naive_us : std::max(job.estimate_us, 1.0)) * factor;
  std::vector<double> samples;
  for (uint64_t i = 0; i < 9; ++i) {
    const uint64_t n = hash64(fmt::format("{}:{}", h, i));
    samples.push_back(base * (1.0 + 0.03 * static_cast<double>(n % 1000) / 1000.0));
  }
  return samples;
}

std::unique_ptr<Farm> make_inprocess_farm(InProcessFarmOptions options) {
  return std::make_unique<InProcessFarm>(std::move(options));
}

}  // namespace dc
