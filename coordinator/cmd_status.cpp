// dc-coordinator status --farm tcp://HOST:PORT [--json]: what a farm service
// (`dc-coordinator serve`) is doing: its workers, its tunes and the queue per GPU type.
#include <iostream>
#include <sstream>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include "cli.h"
#include "farm_security.h"
#include "ir/error.h"
#include "ir/json_writer.h"
#include "status_request.h"

namespace dc::cli {

namespace po = boost::program_options;

namespace {

std::string join(const google::protobuf::RepeatedPtrField<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ",") + s;
  return out.empty() ? "-" : out;
}

// An ETA as the table shows it: "-" while unknown.
std::string eta(double s) {
  if (s < 0) return "-";
  if (s < 90) return fmt::format("{:.0f} s", s);
  if (s < 5400) return fmt::format("{:.0f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

void print_json(const farm::StatusReply& s, std::ostream& os) {
  JsonWriter j(os);
  j.begin_object().field("service", s.service_id()).field("client_protocol_version", int64_t{s.client_protocol_version()});
  j.key("workers").begin_array();
  for (const auto& w : s.workers()) {
    j.begin_object().field("id", w.worker_id()).field("host", w.host());
    j.key("gpu_types").begin_array();
    for (const auto& g : w.gpu_types()) j.value(g);
    j.end_array();
    j.field("state", w.state()).field("jobs_done", w.jobs_done()).field("jobs_failed", w.jobs_failed());
    j.field("leases", int64_t{w.leases()}).field("busy_fraction", w.busy_fraction()).end_object();
  }
  j.end_array().key("tunes").begin_array();
  for (const auto& t : s.tunes()) {
    j.begin_object().field("id", static_cast<int64_t>(t.tune_id())).field("client_host", t.client_host());
    j.field("model", t.model());
    j.key("gpu_types").begin_array();
    for (const auto& g : t.gpu_types()) j.value(g);
    j.end_array();
    j.field("priority", int64_t{t.priority()}).field("submitted", t.submitted()).field("done", t.done());
    j.field("queued", t.queued()).field("measured", t.measured()).field("from_db", t.from_db());
    j.field("joined", t.joined()).field("elapsed_seconds", t.elapsed_seconds());
    j.field("eta_seconds", t.eta_seconds()).field("connected", t.connected()).end_object();
  }
  j.end_array().key("queues").begin_array();
  for (const auto& q : s.queues())
    j.begin_object().field("gpu_type", q.gpu_type()).field("queued", q.queued()).field("in_flight", q.in_flight())
        .field("devices", int64_t{q.devices()}).end_object();
  j.end_array();
  j.field("jobs_measured", s.jobs_measured()).field("jobs_answered_from_db", s.jobs_answered_from_db());
  j.field("jobs_joined", s.jobs_joined()).field("jobs_cancelled", s.jobs_cancelled());
  j.end_object();
  os << "\n";
}

void print_table(const farm::StatusReply& s, std::ostream& os) {
  os << fmt::format("farm service {}: {} jobs measured, {} answered from the DB, {} joined, {} cancelled\n",
                    s.service_id(), s.jobs_measured(), s.jobs_answered_from_db(), s.jobs_joined(), s.jobs_cancelled());
  os << fmt::format("\nworkers ({})\n  {:<28} {:<16} {:<16} {:<6} {:>6} {:>6} {:>6}\n", s.workers_size(), "id", "host",
                    "gpu types", "state", "done", "failed", "busy");
  for (const auto& w : s.workers())
    os << fmt::format("  {:<28} {:<16} {:<16} {:<6} {:>6} {:>6} {:>5.0f}%\n", w.worker_id(), w.host(),
                      join(w.gpu_types()), w.state(), w.jobs_done(), w.jobs_failed(), 100 * w.busy_fraction());
  os << fmt::format("\ntunes ({})\n  {:>4} {:<16} {:<20} {:<12} {:>8} {:>16} {:>8} {:>8}\n", s.tunes_size(), "id",
                    "client", "model", "gpu types", "priority", "progress", "queued", "eta");
  for (const auto& t : s.tunes())
    os << fmt::format("  {:>4} {:<16} {:<20} {:<12} {:>8} {:>16} {:>8} {:>8}\n", t.tune_id(),
                      t.client_host() + (t.connected() ? "" : " (gone)"), t.model(), join(t.gpu_types()), t.priority(),
                      fmt::format("{}/{}", t.done(), t.submitted()), t.queued(), eta(t.eta_seconds()));
  os << fmt::format("\nqueues\n  {:<12} {:>8} {:>10} {:>8}\n", "gpu type", "queued", "in flight", "devices");
  for (const auto& q : s.queues())
    os << fmt::format("  {:<12} {:>8} {:>10} {:>8}\n", q.gpu_type(), q.queued(), q.in_flight(), q.devices());
}

}  // namespace

int cmd_status(const std::vector<std::string>& args) {
  std::string farm_endpoint, none, key_file, server_key_file;
  bool json = false;
  double timeout_s = 5;
  po::options_description desc(
      "usage: dc-coordinator status --farm tcp://HOST:PORT [--json]\n\n"
      "Shows a farm service's workers (id, host, GPU types, state, jobs done and failed, busy\n"
      "fraction: their devices' run time over their time with the service), its tunes (id,\n"
      "client host, model, GPU types, priority, progress, ETA of the jobs submitted so far at the\n"
      "tune's rate so far) and its queue per GPU type.\n\noptions");
  desc.add_options()
      ("help,h", "this text")
      ("farm", po::value(&farm_endpoint), "the service: tcp://HOST:PORT")
      ("json", po::bool_switch(&json), "one JSON object")
      ("timeout", po::value(&timeout_s)->default_value(timeout_s), "seconds to wait for the answer")
      ("farm-key", po::value(&key_file), "CURVE: this client's key pair file (its .pub in the service's --allow-clients)")
      ("farm-server-key", po::value(&server_key_file), "CURVE: the service's public key file");
  const auto parsed = parse_command(args, desc, &none);
  if (!parsed) return kExitOk;
  DC_USER_CHECK(none.empty(), "status takes no positional argument (got '", none, "')");
  DC_USER_CHECK(!farm_endpoint.empty(), "status needs --farm tcp://HOST:PORT");
  DC_USER_CHECK(timeout_s > 0 && timeout_s <= 3600, "--timeout must be more than 0 and at most 3600 seconds");
  DC_USER_CHECK(key_file.empty() == server_key_file.empty(), "CURVE needs both --farm-key and --farm-server-key");
  StatusRequestOptions o;
  o.endpoint = farm_endpoint;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  if (!key_file.empty()) {
    const farm::CurveKeyPair mine = farm::read_curve_keys(key_file, /*need_secret=*/true);
    o.client_public_key = mine.public_key;
    o.client_secret_key = mine.secret_key;
    o.server_public_key = farm::read_curve_keys(server_key_file, /*need_secret=*/false).public_key;
  }
  const farm::StatusReply s = request_status(o);
  if (json) print_json(s, std::cout);
  else print_table(s, std::cout);
  return kExitOk;
}

}  // namespace dc::cli
