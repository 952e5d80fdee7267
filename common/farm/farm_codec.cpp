#include "farm_codec.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>

#include "device_health.h"
#include "ir/dtype.h"

namespace dc::farm {
namespace {

constexpr int kMaxBuffers = 4096;
constexpr int kMaxLaunches = 256;
constexpr int kMaxRank = 8;
constexpr int64_t kMaxBufferBytes = int64_t{16} << 30;
constexpr int64_t kMaxGridDim = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxDynamicSmem = int64_t{1} << 20;

dc::BufferRole role_from_proto(farm::BufferRole r) {
  switch (r) {
    case farm::INPUT: return dc::BufferRole::input;
    case farm::OUTPUT: return dc::BufferRole::output;
    case farm::SCRATCH: return dc::BufferRole::scratch;
    default: break;
  }
  throw ProtocolError(str_cat("unknown buffer role ", static_cast<int>(r)));
}

farm::BufferRole role_to_proto(dc::BufferRole r) {
  switch (r) {
    case dc::BufferRole::input: return farm::INPUT;
    case dc::BufferRole::output: return farm::OUTPUT;
    case dc::BufferRole::scratch: return farm::SCRATCH;
  }
  return farm::SCRATCH;
}

std::array<int64_t, 3> dims3(const google::protobuf::RepeatedField<int64_t>& v, int64_t max,
                             const std::string& what) {
  if (v.size() != 3) throw ProtocolError(str_cat(what, " has ", v.size(), " values, expected 3"));
  std::array<int64_t, 3> out{};
  for (int i = 0; i < 3; ++i) {
    if (v[i] < 1 || v[i] > max)
      throw ProtocolError(str_cat(what, "[", i, "] = ", v[i], " is outside [1, ", max, "]"));
    out[static_cast<size_t>(i)] = v[i];
  }
  return out;
}

}  // namespace

Envelope make_envelope() {
  Envelope e;
  e.set_protocol_version(kProtocolVersion);
  return e;
}

std::string serialize(const Envelope& e) {
  std::string out;
  DC_INTERNAL_CHECK(e.SerializeToString(&out), "cannot serialize a farm envelope");
  return out;
}

std::optional<Envelope> parse_envelope(const void* data, size_t size, size_t max_bytes,
                                       std::string* why) {
  auto fail = [why](std::string reason) -> std::optional<Envelope> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  if (size > max_bytes) return fail(str_cat("frame of ", size, " bytes exceeds the limit of ", max_bytes));
  if (size > static_cast<size_t>(std::numeric_limits<int>::max())) return fail("frame too large");
  Envelope e;
  if (!e.ParseFromArray(data, static_cast<int>(size)))
    return fail(str_cat("frame of ", size, " bytes is not a farm Envelope"));
  if (e.body_case() == Envelope::BODY_NOT_SET)
    return fail(str_cat("envelope (protocol version ", e.protocol_version(), ") without a known body"));
  return e;
}

const char* body_name(const Envelope& e) {
  switch (e.body_case()) {
    case Envelope::kHello: return "hello";
    case Envelope::kWelcome: return "welcome";
    case Envelope::kRefused: return "refused";
    case Envelope::kReady: return "ready";
    case Envelope::kJob: return "job";
    case Envelope::kResult: return "result";
    case Envelope::kHeartbeat: return "heartbeat";
    case Envelope::kBye: return "bye";
    case Envelope::kDisconnect: return "disconnect";
    case Envelope::kJobs: return "jobs";
    case Envelope::kResults: return "results";
    case Envelope::kClientHello: return "client_hello";
    case Envelope::kClientWelcome: return "client_welcome";
    case Envelope::kSubmit: return "submit";
    case Envelope::kOutcome: return "outcome";
    case Envelope::kClientStatus: return "client_status";
    case Envelope::kClientBye: return "client_bye";
    case Envelope::kStatusRequest: return "status_request";
    case Envelope::kStatusReply: return "status_reply";
    case Envelope::kClientHeartbeat: return "client_heartbeat";
    case Envelope::kMarkImplausible: return "mark_implausible";
    case Envelope::kRatiosRequest: return "ratios_request";
    case Envelope::kRatiosReply: return "ratios_reply";
    case Envelope::kSubmits: return "submits";
    case Envelope::kOutcomes: return "outcomes";
    case Envelope::BODY_NOT_SET: break;
  }
  return "none";
}

Kernel to_proto(const GeneratedKernel& k) {
  Kernel p;
  p.set_template_name(k.template_name);
  p.set_variant_key(k.variant_key);
  p.set_source(k.source);
  for (const KernelBuffer& b : k.buffers) {
    Buffer* pb = p.add_buffers();
    pb->set_name(b.name);
    pb->set_role(role_to_proto(b.role));
    pb->set_dtype(static_cast<int32_t>(b.dtype));
    for (int64_t d : b.shape) pb->add_shape(d);
    pb->set_zero_init(b.zero_init);
  }
  for (const dc::Launch& l : k.launches) {
    farm::Launch* pl = p.add_launches();
    pl->set_kernel(l.kernel);
    for (int64_t d : l.grid) pl->add_grid(d);
    for (int64_t d : l.block) pl->add_block(d);
    pl->set_dynamic_smem_bytes(l.dynamic_smem_bytes);
    for (int a : l.args) pl->add_args(a);
  }
  return p;
}

GeneratedKernel from_proto(const Kernel& p) { return from_proto(Kernel(p)); }

GeneratedKernel from_proto(Kernel&& p) {
  GeneratedKernel k;
  k.template_name = p.template_name();
  k.variant_key = p.variant_key();
  k.source = std::move(*p.mutable_source());
  if (k.source.empty()) throw ProtocolError("kernel '" + k.template_name + "' has no source");
  if (p.buffers_size() > kMaxBuffers)
    throw ProtocolError(str_cat("kernel has ", p.buffers_size(), " buffers (at most ", kMaxBuffers, ")"));
  if (p.launches_size() < 1 || p.launches_size() > kMaxLaunches)
    throw ProtocolError(str_cat("kernel has ", p.launches_size(), " launches (1 to ", kMaxLaunches, ")"));
  for (const Buffer& pb : p.buffers()) {
    KernelBuffer b;
    b.name = pb.name();
    b.role = role_from_proto(pb.role());
    const std::optional<DType> dt = dtype_from_onnx(pb.dtype());
    if (!dt || *dt == DType::undefined)
      throw ProtocolError(str_cat("buffer '", b.name, "' has unknown dtype code ", pb.dtype()));
    b.dtype = *dt;
    if (pb.shape_size() > kMaxRank)
      throw ProtocolError(str_cat("buffer '", b.name, "' has rank ", pb.shape_size(), " (at most ", kMaxRank, ")"));
    int64_t bytes = static_cast<int64_t>(dtype_size(b.dtype));
    for (int64_t d : pb.shape()) {
      if (d < 0 || d > kMaxBufferBytes)
        throw ProtocolError(str_cat("buffer '", b.name, "' has dimension ", d));
      bytes = d == 0 ? 0 : (bytes > kMaxBufferBytes / d ? kMaxBufferBytes + 1 : bytes * d);
      b.shape.push_back(d);
    }
    if (bytes > kMaxBufferBytes)
      throw ProtocolError(str_cat("buffer '", b.name, "' is larger than ", kMaxBufferBytes, " bytes"));
    b.zero_init = pb.zero_init();
    k.buffers.push_back(std::move(b));
  }
  for (const farm::Launch& pl : p.launches()) {
    dc::Launch l;
    l.kernel = pl.kernel();
    if (l.kernel.empty()) throw ProtocolError("launch without a kernel name");
    l.grid = dims3(pl.grid(), kMaxGridDim, "launch '" + l.kernel + "' grid");
    l.block = dims3(pl.block(), 1024, "launch '" + l.kernel + "' block");
    if (l.block[0] * l.block[1] * l.block[2] > 1024)
      throw ProtocolError("launch '" + l.kernel + "' has more than 1024 threads per block");
    if (pl.dynamic_smem_bytes() < 0 || pl.dynamic_smem_bytes() > kMaxDynamicSmem)
      throw ProtocolError(str_cat("launch '", l.kernel, "' asks for ", pl.dynamic_smem_bytes(),
                                  " bytes of dynamic shared memory"));
    l.dynamic_smem_bytes = pl.dynamic_smem_bytes();
    for (int32_t a : pl.args()) {
      if (a < 0 || a >= p.buffers_size())
        throw ProtocolError(str_cat("launch '", l.kernel, "' names buffer ", a, " of ", p.buffers_size()));
      l.args.push_back(a);
    }
    k.launches.push_back(std::move(l));
  }
  return k;
}

namespace {
// A kernel for the wire, its source moved rather than copied.
Kernel wire_kernel(GeneratedKernel&& k) {
  std::string source = std::move(k.source);
  k.source.clear();
  Kernel p = to_proto(k);
  p.set_source(std::move(source));
  return p;
}

}  // namespace

uint32_t wire_ms(std::chrono::milliseconds ms) {
  return static_cast<uint32_t>(std::clamp<int64_t>(ms.count(), 1, int64_t{1} << 31));
}

Job to_proto(MeasureJob&& job) {
  Job w;
  w.set_job_id(job.job_id);
  w.set_gpu_type(job.gpu_type);
  w.set_workload(job.workload);
  *w.mutable_variant() = wire_kernel(std::move(job.variant_kernel));
  *w.mutable_reference() = wire_kernel(std::move(job.reference));
  w.set_seed(job.seed);
  w.set_rtol(job.tolerance.rtol);
  w.set_atol(job.tolerance.atol);
  w.set_compile_deadline_ms(wire_ms(job.compile_deadline));
  w.set_run_deadline_ms(wire_ms(job.run_deadline));
  w.set_check_on_emulator(job.check_on_emulator);
  w.set_estimate_us(job.estimate_us);
  w.set_precision(job.precision);
  w.set_flops(job.flops);
  w.set_bytes(job.bytes);
  for (int64_t b : job.index_bounds) w.add_index_bounds(b);
  return w;
}

MeasureJob job_from_proto(Job&& w) {
  MeasureJob job;
  job.job_id = w.job_id();
  job.gpu_type = w.gpu_type();
  job.workload = w.workload();
  job.precision = w.precision();
  job.variant_kernel = from_proto(std::move(*w.mutable_variant()));
  job.reference = from_proto(std::move(*w.mutable_reference()));
  job.seed = w.seed();
  job.tolerance.rtol = w.rtol();
  job.tolerance.atol = w.atol();
  job.check_on_emulator = w.check_on_emulator();
  job.estimate_us = w.estimate_us();
  job.flops = w.flops();
  job.bytes = w.bytes();
  job.index_bounds.assign(w.index_bounds().begin(), w.index_bounds().end());
  job.compile_deadline = std::chrono::milliseconds(w.compile_deadline_ms());
  job.run_deadline = std::chrono::milliseconds(w.run_deadline_ms());
  return job;
}

Result to_proto(const JobOutcome& o) {
  Result r;
  r.set_status(std::string(job_status_name(o.status)));
  r.set_error(o.error);
  for (double s : o.samples_us) r.add_samples_us(s);
  r.set_max_rel_error(o.max_rel_error);
  r.set_registers(o.registers);
  r.set_spill_bytes(o.spill_bytes);
  r.set_smem_bytes(o.smem_bytes);
  r.set_compile_seconds(o.compile_seconds);
  r.set_compile_cached(o.compile_cached);
  r.set_nvrtc_version(o.nvrtc_version);
  r.set_driver_version(o.driver_version);
  r.set_emulated(o.emulated);
  r.set_source_hash(o.source_hash);
  if (o.health) *r.mutable_health() = health_message(*o.health);
  return r;
}

std::string validate_result(const Result& r) {
  if (!parse_job_status(r.status())) return "unknown status '" + r.status().substr(0, 64) + "'";
  if (r.samples_us_size() > kMaxSamples) return str_cat(r.samples_us_size(), " samples (at most ", kMaxSamples, ")");
  for (double s : r.samples_us())
    if (!std::isfinite(s) || s < 0) return str_cat("sample ", s, " is not a finite time");
  if (parse_job_status(r.status()) == JobStatus::ok && r.samples_us_size() == 0)
    return "status ok without samples";
  if (r.registers() < 0 || r.spill_bytes() < 0 || r.smem_bytes() < 0 || !std::isfinite(r.compile_seconds()) ||
      r.compile_seconds() < 0 || !std::isfinite(r.run_seconds()) || r.run_seconds() < 0)
    return "negative resource figures";
  return "";
}

Measurement measurement_from_result(const Result& r) {
  Measurement m;
  m.status = parse_job_status(r.status()).value_or(JobStatus::runtime_fault);
  m.error = r.error();
  m.samples_us.assign(r.samples_us().begin(), r.samples_us().end());
  summarize_samples(m);
  // NaN outputs make NaN errors: keep them as "infinitely wrong", which sorts and stores.
  m.max_rel_error = std::isnan(r.max_rel_error()) ? std::numeric_limits<double>::infinity() : r.max_rel_error();
  m.registers = r.registers();
  m.spill_bytes = r.spill_bytes();
  m.smem_bytes = r.smem_bytes();
  m.compile_seconds = r.compile_seconds();
  m.run_seconds = r.run_seconds();
  if (r.has_health()) m.health = health_figures(r.health());
  else m.health.note = "the worker does not report it";
  m.nvrtc_version = r.nvrtc_version();
  m.driver_version = r.driver_version();
  m.emulated = r.emulated();
  m.source_hash = r.source_hash();
  m.finished_unix_ms = unix_ms_now();
  return m;
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace dc::farm
