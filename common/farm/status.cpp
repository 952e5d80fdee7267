#include "farm/status.h"

#include <array>
#include <utility>

namespace dc {

namespace {
constexpr std::array<std::pair<JobStatus, std::string_view>, 11> kNames = {{
    {JobStatus::ok, "ok"},
    {JobStatus::compile_error, "compile_error"},
    {JobStatus::launch_error, "launch_error"},
    {JobStatus::runtime_fault, "runtime_fault"},
    {JobStatus::wrong_result, "wrong_result"},
    {JobStatus::timeout, "timeout"},
    {JobStatus::worker_lost, "worker_lost"},
    {JobStatus::unsupported, "unsupported"},
    {JobStatus::internal_error, "internal_error"},
    {JobStatus::implausible, "implausible"},
    {JobStatus::unhealthy, "unhealthy"},
}};
}  // namespace

std::string_view job_status_name(JobStatus s) {
  for (const auto& [k, v] : kNames)
    if (k == s) return v;
  return "?";
}

bool is_final_status(JobStatus s) {
  return s != JobStatus::worker_lost && s != JobStatus::internal_error && s != JobStatus::implausible &&
         s != JobStatus::unhealthy;
}

bool is_recorded_status(JobStatus s) { return s != JobStatus::internal_error && s != JobStatus::unhealthy; }

const std::string& not_final_statuses_sql() {
  static const std::string sql = [] {
    std::string out;
    for (const auto& [status, name] : kNames)
      if (!is_final_status(status)) out += (out.empty() ? "('" : ", '") + std::string(name) + "'";
    return out + ")";
  }();
  return sql;
}

std::optional<JobStatus> parse_job_status(std::string_view name) {
  for (const auto& [k, v] : kNames)
    if (v == name) return k;
  return std::nullopt;
}

}  // namespace dc
