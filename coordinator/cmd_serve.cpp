// dc-coordinator serve --bind tcp://ADDR:PORT --db PATH [--keys FILE] [--allow-workers FILE]
//   [--allow-clients FILE] [--metrics ADDR:PORT] [--client-grace S]: the farm as a long-lived service (service/farm_service.h) that
// owns the tuning DB; dc-worker daemons connect as to a tune's broker, tunes with
// `tune --farm`. docs/farm.md, "The farm as a service".
#include <atomic>
#include <csignal>
#include <filesystem>
#include <iostream>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli.h"
#include "farm_security.h"
#include "farm_service.h"
#include "ir/error.h"
#include "metrics_http.h"
#include "metrics_text.h"
#include "sqlite.h"

namespace dc::cli {

namespace po = boost::program_options;

namespace {

std::atomic<bool> g_serve_stop{false};
extern "C" void on_serve_signal(int) { g_serve_stop.store(true); }

}  // namespace

int cmd_serve(const std::vector<std::string>& args) {
  std::string bind, db_path, keys, allow_workers, allow_clients, metrics, none;
  int window = 2;
  int page_refresh_s = 5;
  double db_timeout_s = 5;
  double client_grace_s = 10;
  po::options_description desc(
      "usage: dc-coordinator serve --bind tcp://ADDR:PORT --db PATH [options]\n\n"
      "Runs the measurement farm as a long-lived service that owns the tuning DB. dc-worker\n"
      "daemons connect to it as to `tune --bind`; tunes use it with `tune --farm tcp://HOST:PORT`\n"
      "and share its workers (weighted fair share per GPU type, by their --priority), its\n"
      "measurements (identical jobs are measured once) and its DB (known results are answered\n"
      "at once). `dc-coordinator status --farm ...` shows workers, tunes and queues.\n"
      "A loopback address works without keys; any other needs --keys and --allow-workers\n"
      "(and --allow-clients for the tunes). --metrics serves Prometheus metrics at /metrics and\n"
      "a status page at / over HTTP. SIGINT/SIGTERM stop it. docs/farm.md.\n\noptions");
  desc.add_options()
      ("help,h", "this text")
      ("bind", po::value(&bind), "where workers and tunes connect: tcp://ADDR:PORT")
      ("db", po::value(&db_path), "the tuning DB (SQLite, created if missing)")
      ("db-timeout", po::value(&db_timeout_s)->default_value(db_timeout_s), "seconds to wait for "
       "another process's write lock on the DB (dc-db) before a commit fails (logged)")
      ("keys", po::value(&keys), "CURVE: this service's key pair file (dc-coordinator keygen)")
      ("allow-workers", po::value(&allow_workers), "CURVE: file of the workers' public keys allowed in")
      ("allow-clients", po::value(&allow_clients), "CURVE: file of the clients' (tunes', status) public "
       "keys allowed in; a separate list: a client key cannot join as a worker, nor a worker's submit jobs")
      ("window", po::value(&window)->default_value(window), "jobs handed to the broker per device of a "
       "GPU type ahead of need; the rest wait in the fair-share queues")
      ("client-grace", po::value(&client_grace_s)->default_value(client_grace_s), "seconds a tune that fell "
       "silent is kept, its queued jobs with it (not dispatched meanwhile), for its client to reconnect and "
       "resume; then its queued jobs are cancelled (0: at once). A tune that says bye (ends, or is "
       "interrupted) is ended at once")
      ("metrics", po::value(&metrics), "HTTP: Prometheus metrics at /metrics and a status page at / on "
       "PORT (127.0.0.1) or ADDR:PORT; read-only and without authentication, so give a non-loopback ADDR "
       "only on a network you trust (port 0: a free one, printed)")
      ("page-refresh", po::value(&page_refresh_s)->default_value(page_refresh_s), "seconds between reloads "
       "of the status page (its meta refresh)");
  const auto parsed = parse_command(args, desc, &none);
  if (!parsed) return kExitOk;
  DC_USER_CHECK(none.empty(), "serve takes no positional argument (got '", none, "')");
  DC_USER_CHECK(!bind.empty(), "serve needs --bind tcp://ADDR:PORT (127.0.0.1 for this machine only)");
  DC_USER_CHECK(!db_path.empty(), "serve needs --db PATH: the tuning DB it owns");
  DC_USER_CHECK(window >= 1 && window <= 64, "--window must be 1 to 64");
  DC_USER_CHECK(client_grace_s >= 0 && client_grace_s <= 86400, "--client-grace must be 0 to 86400 seconds");
  DC_USER_CHECK(page_refresh_s >= 1 && page_refresh_s <= 3600, "--page-refresh must be 1 to 3600 seconds");
  DC_USER_CHECK(db_timeout_s >= 0 && db_timeout_s <= 86400, "--db-timeout must be between 0 and 86400 seconds");
  DC_USER_CHECK(keys.empty() == allow_workers.empty(),
                "CURVE needs both --keys (this service's key pair) and --allow-workers (the workers' public keys)");
  DC_USER_CHECK(keys.empty() ? allow_clients.empty() : true, "--allow-clients needs --keys");
  if (keys.empty())
    DC_USER_CHECK(farm::is_loopback_endpoint(bind), "serve: ", bind, " can be reached from other machines, and "
                  "workers run the code that clients send: give --keys FILE (dc-coordinator keygen), "
                  "--allow-workers FILE and --allow-clients FILE, or bind to 127.0.0.1 for this machine only");

  FarmServiceOptions o;
  o.broker.endpoint = bind;
  o.window_per_device = window;
  o.client_grace = std::chrono::milliseconds(static_cast<int64_t>(client_grace_s * 1000));
  std::unique_ptr<MetricsHttpServer> http;
  if (!metrics.empty()) {
    const MetricsAddress address = parse_metrics_address(metrics);
    http = std::make_unique<MetricsHttpServer>(address);
    if (!address.loopback())
      spdlog::warn("serve: --metrics {} can be reached from other machines: the metrics and the status page "
                   "(workers, hosts, models) are served to anyone who can connect", metrics);
    o.on_view = [&http, page_refresh_s](const ServiceView& v) {
      http->publish(prometheus_text(v), status_page_html(v, page_refresh_s));
    };
  }
  if (!keys.empty()) {
    o.broker.curve_secret_key = farm::read_curve_keys(keys, /*need_secret=*/true).secret_key;
    o.broker.allowed_worker_keys = farm::read_public_keys(allow_workers);
    if (!allow_clients.empty()) o.broker.allowed_client_keys = farm::read_public_keys(allow_clients);
    else spdlog::warn("serve: no --allow-clients: with CURVE no tune can connect");
  }
  if (const auto parent = std::filesystem::path(db_path).parent_path(); !parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    DC_USER_CHECK(!ec, "cannot create the folder of the tuning DB '", db_path, "': ", ec.message());
  }
  sqlite::set_busy_timeout(std::chrono::milliseconds(static_cast<int64_t>(db_timeout_s * 1000)));
  std::unique_ptr<TuningDb> db = open_tuning_db(db_path);
  FarmService service(o, *db);
  const std::string key = service.public_key();
  std::cout << fmt::format("serve: farm service at {}{}, DB {}\n"
                           "  workers: dc-worker --connect {}{}\n"
                           "  tunes:   dc-coordinator tune MODEL --gpus LIST --farm {}{}\n",
                           service.endpoint(), key.empty() ? "" : " (CURVE, public key " + key + ")", db_path,
                           service.endpoint(), key.empty() ? "" : " --server-key FILE --key FILE", service.endpoint(),
                           key.empty() ? "" : " --farm-server-key FILE --farm-key FILE");
  if (http) std::cout << fmt::format("  metrics: {}metrics, status page: {}\n", http->url(), http->url());
  std::cout << std::flush;
  g_serve_stop.store(false);
  struct sigaction sa {};
  sa.sa_handler = on_serve_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  service.run(g_serve_stop);
  std::cout << "serve: stopped\n";
  return kExitOk;
}

}  // namespace dc::cli
