#include "farm_codec.h"

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
    case Envelope::kClientHello: return "client_hello";
    case Envelope::kClientWelcome: return "client_welcome";
    case Envelope::kSubmit: return "submit";
    case Envelope::kOutcome: return "outcome";
    case Envelope::kClientStatus: return "client_status";
    case Envelope::kClientBye: return "client_bye";
    case Envelope::kStatusRequest: return "status_request";
    case Envelope::kStatusReply: return "status_reply";
    case Envelope::kClientHeartbeat: return "client_heartbeat";
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
  m.health = r.has_health() ? describe_health(r.health()) : "no health data (the worker does not report it)";
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
