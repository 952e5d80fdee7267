#include "client_codec.h"

#include <cmath>
#include <unordered_map>

#include "device_health.h"
#include "farm_codec.h"

namespace dc::farm {

bool is_client_body(const Envelope& e) {
  switch (e.body_case()) {
    case Envelope::kClientHello:
    case Envelope::kClientWelcome:
    case Envelope::kSubmit:
    case Envelope::kOutcome:
    case Envelope::kClientStatus:
    case Envelope::kClientBye:
    case Envelope::kStatusRequest:
    case Envelope::kStatusReply:
    case Envelope::kClientHeartbeat:
    case Envelope::kMarkImplausible:
    case Envelope::kRatiosRequest:
    case Envelope::kRatiosReply:
    case Envelope::kSubmits:
    case Envelope::kOutcomes:
      return true;
    default:
      return false;
  }
}

std::vector<std::pair<std::string, Envelope>> batch_outcomes(std::vector<std::pair<std::string, Envelope>> messages) {
  std::vector<std::pair<std::string, Envelope>> out;
  out.reserve(messages.size());
  std::unordered_map<std::string, std::pair<size_t, size_t>> open;  // identity: its batch in `out`, bytes
  for (auto& [identity, e] : messages) {
    if (e.body_case() != Envelope::kOutcome) {
      out.emplace_back(std::move(identity), std::move(e));
      continue;
    }
    const size_t bytes = e.outcome().ByteSizeLong();
    auto it = open.find(identity);
    if (it == open.end() || it->second.second + bytes > kMaxClientBatchBytes) {
      out.emplace_back(identity, make_envelope());
      out.back().second.mutable_outcomes();
      it = open.insert_or_assign(identity, std::pair<size_t, size_t>{out.size() - 1, 0}).first;
    }
    out[it->second.first].second.mutable_outcomes()->add_outcomes()->Swap(e.mutable_outcome());
    it->second.second += bytes;
  }
  return out;
}

Record to_record(const Measurement& m) {
  Record r;
  r.set_workload(m.workload);
  r.set_variant_key(m.variant_key);
  r.set_source_hash(m.source_hash);
  r.set_gpu_type(m.gpu_type);
  r.set_worker(m.worker);
  r.set_host(m.host);
  r.set_device(m.device);
  r.set_status(std::string(job_status_name(m.status)));
  r.set_error(m.error);
  for (double s : m.samples_us) r.add_samples_us(s);
  r.set_n_samples(m.n_samples);
  r.set_median_us(m.median_us);
  r.set_min_us(m.min_us);
  r.set_p10_us(m.p10_us);
  r.set_p90_us(m.p90_us);
  r.set_mean_us(m.mean_us);
  r.set_mad_us(m.mad_us);
  r.set_spread(m.spread);
  r.set_max_rel_error(m.max_rel_error);
  r.set_registers(m.registers);
  r.set_spill_bytes(m.spill_bytes);
  r.set_smem_bytes(m.smem_bytes);
  r.set_compile_seconds(m.compile_seconds);
  r.set_run_seconds(m.run_seconds);
  r.set_estimate_us(m.estimate_us);
  r.set_nvrtc_version(m.nvrtc_version);
  r.set_driver_version(m.driver_version);
  r.set_emulated(m.emulated);
  r.set_attempts(m.attempts);
  r.set_finished_unix_ms(m.finished_unix_ms);
  *r.mutable_health() = health_message(m.health);
  return r;
}

Measurement from_record(const Record& r) {
  const std::optional<JobStatus> status = parse_job_status(r.status());
  if (!status) throw ProtocolError(str_cat("unknown status '", r.status().substr(0, 40), "'"));
  if (r.samples_us_size() > kMaxSamples)
    throw ProtocolError(str_cat(r.samples_us_size(), " samples (at most ", kMaxSamples, ")"));
  for (double s : r.samples_us())
    if (!std::isfinite(s) || s < 0) throw ProtocolError("a sample that is not a finite non-negative time");
  for (double v : {r.median_us(), r.min_us(), r.p10_us(), r.p90_us(), r.mean_us(), r.mad_us(), r.spread(),
                   r.max_rel_error(), r.compile_seconds(), r.run_seconds()})
    if (!std::isfinite(v) || v < 0) throw ProtocolError("a figure that is not finite and non-negative");
  Measurement m;
  m.workload = r.workload();
  m.variant_key = r.variant_key();
  m.source_hash = r.source_hash();
  m.gpu_type = r.gpu_type();
  m.worker = r.worker();
  m.host = r.host();
  m.device = r.device();
  m.status = *status;
  m.error = r.error();
  m.samples_us.assign(r.samples_us().begin(), r.samples_us().end());
  m.n_samples = r.n_samples();
  m.median_us = r.median_us();
  m.min_us = r.min_us();
  m.p10_us = r.p10_us();
  m.p90_us = r.p90_us();
  m.mean_us = r.mean_us();
  m.mad_us = r.mad_us();
  m.spread = r.spread();
  m.max_rel_error = r.max_rel_error();
  m.registers = r.registers();
  m.spill_bytes = r.spill_bytes();
  m.smem_bytes = r.smem_bytes();
  m.compile_seconds = r.compile_seconds();
  m.run_seconds = r.run_seconds();
  m.estimate_us = std::isfinite(r.estimate_us()) ? r.estimate_us() : 0;
  m.nvrtc_version = r.nvrtc_version();
  m.driver_version = r.driver_version();
  m.emulated = r.emulated();
  m.attempts = r.attempts();
  m.finished_unix_ms = r.finished_unix_ms();
  if (r.has_health()) m.health = health_figures(r.health());
  else m.health.note = "the farm service does not report it";
  return m;
}

}  // namespace dc::farm
