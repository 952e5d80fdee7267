// dc-coordinator tune MODEL.onnx --gpus LIST [--db PATH] [--db-timeout S] [--out DIR]
//   [--bind tcp://ADDR:PORT] [--local-workers N] [--emulate] [--config FILE] [--retune] [--no-db-calibration]
//   [--farm tcp://HOST:PORT [--priority N]] (through a farm service: service/remote_farm.h):
// measures the model's kernel variants on a farm and selects, per GPU type, the cover with
// the least measured time.
// The pipeline is tune.h; this file is the command line, the choice of farm and the output.
// docs/tune.md describes both.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <sstream>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "cli.h"
#include "train_options.h"
#include "device_discovery.h"
#include "farm_broker.h"
#include "farm_local.h"
#include "farm_security.h"
#include "gpu/gpu_catalog.h"
#include "opencl_compile.h"
#include "opencl_device.h"
#include "ir/host.h"
#include "ir/json_writer.h"
#include "nvrtc.h"
#include "nvrtc_loader.h"
#include "remote_farm.h"
#include "sqlite.h"
#include "tune.h"
#include "tune_config.h"
#include "tune_report.h"

namespace dc::cli {

namespace po = boost::program_options;

namespace {

constexpr int kExitInterrupted = 130;

// SIGINT/SIGTERM: stop collecting, keep what arrived, print the summary. A second signal
// kills (SA_RESETHAND restores the default action after the first).
std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) { g_stop.store(true); }

class StopSignals {
 public:
  StopSignals() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

struct FarmFlags {
  std::string bind;
  std::string farm;            // --farm: tune through a farm service
  int priority = 1;
  std::string farm_key;        // CURVE with the service: this client's key pair
  std::string farm_server_key; // and the service's public key
  double reconnect_s = 60;     // --farm-reconnect: how long to try to reach a lost service
  int local_workers = 0;       // 0: the default
  bool emulate = false;
  bool insecure = false;
  std::string curve_key;       // the coordinator's key pair file (dc-coordinator keygen)
  std::string allow_workers;   // allow-list of worker public keys
};

// --bind: a broker that remote dc-worker daemons connect to.
// tune creates the DB if missing, and its folder too (as --out is created).
void make_db_folder(const std::string& db_path) {
  if (db_path == ":memory:" || db_path.rfind("file:", 0) == 0) return;
  const std::filesystem::path parent = std::filesystem::path(db_path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  DC_USER_CHECK(!ec, "cannot create the folder of the tuning DB '", db_path, "': ", ec.message());
}

std::unique_ptr<Farm> make_bound_farm(const FarmFlags& f, std::ostream& console) {
  FarmBrokerOptions b;
  b.endpoint = f.bind;
  b.insecure = f.insecure;
  DC_USER_CHECK(f.curve_key.empty() == f.allow_workers.empty(),
                "CURVE needs both --curve-key (this coordinator's key pair) and --allow-workers "
                "(the workers' public keys)");
  if (!f.curve_key.empty()) {
    b.curve_secret_key = farm::read_curve_keys(f.curve_key, /*need_secret=*/true).secret_key;
    b.allowed_worker_keys = farm::read_public_keys(f.allow_workers);
  }
  if (f.emulate) b.require_emulated = true;
  auto broker = std::make_unique<FarmBroker>(b);
  console << fmt::format("tune: serving dc-worker daemons at {}{}; start them with\n"
                         "      dc-worker --connect {}{}\n",
                         broker->endpoint(),
                         broker->public_key().empty() ? "" : " (CURVE, public key " + broker->public_key() + ")",
                         broker->endpoint(), broker->public_key().empty() ? "" : " --server-key FILE --key FILE");
  return broker;
}

// The farm the flags ask for: a broker for remote workers (--bind), or the local farm of dc-worker processes: one per
// local GPU, or, with --emulate or no CUDA device, N emulated workers per requested type.
std::unique_ptr<Farm> make_farm(const FarmFlags& f, const std::vector<const GpuSpec*>& gpus,
                                const GpuCatalog& catalog, std::ostream& console, bool* emulated,
                                std::chrono::milliseconds wait) {
  *emulated = f.emulate;
  if (!f.bind.empty()) return make_bound_farm(f, console);
  DC_INTERNAL_CHECK(f.farm.empty(), "make_farm with --farm");
  std::vector<std::string> types;
  for (const GpuSpec* g : gpus) types.push_back(g->name);

  LocalFarmOptions o;
  const size_t n_opencl = static_cast<size_t>(
      std::count_if(gpus.begin(), gpus.end(), [](const GpuSpec* g) { return g->is_opencl(); }));
  if (n_opencl > 0) {
    // OpenCL types run on this machine's OpenCL devices of that type (PoCL's CPU device for
    // pocl-cpu): real measurements, never emulated.
    DC_USER_CHECK(!f.emulate, "--emulate: OpenCL device types (", fmt::format("{}", fmt::join(types, ", ")),
                  ") are measured, never emulated");
    DC_USER_CHECK(n_opencl == gpus.size(), "--gpus mixes OpenCL and CUDA types: tune them separately");
    std::string why;
    const auto found = ocl::list_devices(catalog, &why);
    for (const GpuSpec* g : gpus) {
      int taken = 0;
      for (const auto& d : found)
        if (d.gpu_type == g->name && d.spir && (f.local_workers == 0 || taken < f.local_workers)) {
          o.opencl_devices.push_back(d.index);
          ++taken;
        }
      DC_USER_CHECK(taken > 0, "no local OpenCL device of type ", g->name,
                    found.empty() ? " (" + why + ")" : " (dc-worker --list-devices shows what there is)");
    }
    auto farm = make_local_farm(o);
    const int joined = farm->wait_for_workers(wait);
    console << fmt::format("tune: local farm, {} dc-worker(s) for local OpenCL device(s) {}, {} joined: times "
                           "are measured\n", o.opencl_devices.size(), fmt::join(o.opencl_devices, ","), joined);
    return farm;
  }
  if (!f.emulate) {
    std::string why_none;
    std::vector<int> usable;
    for (const auto& d : discover_devices(catalog, &why_none))
      if (d.usable()) usable.push_back(d.ordinal);
    if (usable.empty()) {
      console << fmt::format("tune: no usable CUDA device here ({}): running emulated workers "
                             "instead\n", why_none.empty() ? "none usable" : why_none);
    } else {
      const size_t n = f.local_workers > 0 ? std::min(usable.size(), static_cast<size_t>(f.local_workers))
                                           : usable.size();
      o.devices.assign(usable.begin(), usable.begin() + static_cast<std::ptrdiff_t>(n));
    }
  }
  o.emulate = o.devices.empty();
  *emulated = o.emulate;
  if (o.emulate) {
    // An emulated worker compiles for real: refuse a type no NVRTC here targets, with what to
    // install, rather than let its workers exit (docs/compilation.md, "Which NVRTC").
    for (const GpuSpec* g : gpus)
      DC_USER_CHECK(!nvrtc_arch_for(g->cc_major, g->cc_minor, supported_archs()).empty(), "--gpus ", g->name,
                    ": no installed NVRTC compiles for ", g->sm_arch(), ", so it cannot be emulated here (",
                    describe_nvrtc(installed_nvrtc()), "). ", nvrtc_install_hint(g->cc_major * 10 + g->cc_minor));
    o.gpu_types = types;
    o.workers = f.local_workers > 0 ? f.local_workers : 1;
  }
  auto farm = make_local_farm(o);
  const int joined = farm->wait_for_workers(wait);
  if (o.emulate)
    console << fmt::format("tune: local farm, {} emulated dc-worker(s) per GPU type ({}), {} joined: "
                           "times are MODELLED, not measured\n", o.workers, fmt::join(types, ", "), joined);
  else
    console << fmt::format("tune: local farm, {} dc-worker(s) for local GPU(s) {}, {} device(s) joined\n",
                           o.devices.size(), fmt::join(o.devices, ","), joined);
  return farm;
}

std::string options_json(const std::string& gpus, const PlanOptions& plan, const FarmFlags& f,
                         bool retune, bool calibration_from_db) {
  std::ostringstream os;
  JsonWriter j(os);
  j.begin_object().field("gpus", gpus).field("top_k", plan.prune.top_k);
  j.field("within", plan.prune.within_factor).field("retune", retune).field("emulate", f.emulate);
  j.field("farm", !f.farm.empty() ? "service " + f.farm : f.bind.empty() ? std::string("local") : "bind " + f.bind);
  j.field("local_workers", f.local_workers);
  if (!f.farm.empty()) j.field("priority", f.priority);
  j.field("calibration_from_db", calibration_from_db);
  j.field("precision", precision_name(plan.precision));
  j.key("precisions").begin_array();
  for (const auto& p : plan.space.precisions) j.value(p);
  j.end_array().end_object();
  return os.str();
}

}  // namespace

int cmd_tune(const std::vector<std::string>& args) {
  std::string model, gpu_list, db_path = "dc-tuning.db", out_dir, config;
  std::vector<std::string> shapes;
  FarmFlags farm_flags;
  bool retune = false, no_check = false, no_cross_check = false, quiet = false, no_db_calibration = false, no_reference = false,
       no_param_calibration = false, rank_calibration = false;
  double wait_s = -1, db_timeout_s = 5, compile_deadline_s = 60, run_deadline_s = 30;
  int seed_k = 4;
  po::options_description desc(
      "usage: dc-coordinator tune MODEL.onnx --gpus LIST [options]\n\n"
      "Measures the kernel variants that survive the estimator on a farm of workers, commits\n"
      "every result to the tuning DB as it arrives, and selects for each GPU type the cover\n"
      "of the graph with the least measured time. Variants the DB already holds for a GPU\n"
      "type are not measured again, so a rerun after a crash resumes. docs/tune.md.\n\noptions");
  desc.add_options()
      ("help,h", "this text")
      ("gpus", po::value(&gpu_list), "comma-separated GPU types, e.g. h100,a100")
      ("db", po::value(&db_path)->default_value(db_path), "tuning DB (SQLite, created if missing)")
      ("db-timeout", po::value(&db_timeout_s)->default_value(db_timeout_s), "seconds to wait for "
       "another process's write lock on the DB before stopping with an error")
      ("compile-deadline", po::value(&compile_deadline_s)->default_value(compile_deadline_s), "seconds "
       "a job's compile (NVRTC, ptxas) may take before the worker kills it: a timeout result")
      ("run-deadline", po::value(&run_deadline_s)->default_value(run_deadline_s), "seconds a job's "
       "run (reference kernel, check, timing) may take before the worker kills it: a timeout result; "
       "a workload whose fp32 floor on the device is long gets 1000x that floor instead")
      ("out", po::value(&out_dir), "write DIR/<gpu>/: the plan (plan.json, kernels.cu, weights.bin), summary.txt, selection.json")
      ("bind", po::value(&farm_flags.bind), "serve remote dc-worker daemons at tcp://ADDR:PORT "
       "instead of running a local farm")
      ("farm", po::value(&farm_flags.farm), "tune through a farm service (dc-coordinator serve) at "
       "tcp://HOST:PORT: its workers and its tuning DB; the plan is written here")
      ("priority", po::value(&farm_flags.priority)->default_value(1), "--farm: this tune's weight in "
       "the service's fair share per GPU type (1 to 100)")
      ("farm-key", po::value(&farm_flags.farm_key), "--farm with CURVE: this client's key pair file "
       "(its .pub in the service's --allow-clients)")
      ("farm-server-key", po::value(&farm_flags.farm_server_key), "--farm with CURVE: the service's "
       "public key file")
      ("farm-reconnect", po::value(&farm_flags.reconnect_s)->default_value(farm_flags.reconnect_s), "--farm: "
       "seconds to keep trying to reach a service that was lost (restarted, network down); once back, the "
       "tune resumes and sends again every job it has no result for (0: stop at once)")
      ("local-workers", po::value(&farm_flags.local_workers), "local farm: N workers (default: one "
       "per local GPU; emulated workers: N per requested GPU type, default 1)")
      ("emulate", po::bool_switch(&farm_flags.emulate), "emulated devices: compile for real, "
       "times from a timing model (marked emulated everywhere)")
      ("config", po::value(&config), "tuning configuration YAML (examples/tune.yaml); flags override it")
      ("retune", po::bool_switch(&retune), "measure again what the DB already holds")
      ("no-db-calibration", po::bool_switch(&no_db_calibration), "estimate with the config's "
       "calibration factors only, not factors fitted from the DB's results")
      ("no-param-calibration", po::bool_switch(&no_param_calibration), "fit only the per-kind factors from "
       "the DB, not the per-parameter ones that reorder a workload's variants (real results only)")
      ("rank-calibration", po::bool_switch(&rank_calibration), "experimental: rank a workload's variants "
       "by pairwise ranking vectors fitted from the DB's real results, in place of their per-parameter "
       "factors (docs/estimator.md, \"Pairwise ranking calibration\")")
      ("top-k", po::value<int>(), "pruning: at most this many variants per workload")
      ("within", po::value<double>(), "pruning: keep variants within this factor of the best estimate")
      ("shape", po::value(&shapes)->composing(), "NAME=DIMS: fix an input's shape (repeatable)")
      ("wait-workers", po::value(&wait_s), "seconds to wait for a worker of each GPU type "
       "(default 30; 120 with --bind)")
      ("seed-k", po::value(&seed_k)->default_value(seed_k), "variants borrowed per workload from "
       "the nearest GPU type with results (0: none)")
      ("no-reference", po::bool_switch(&no_reference), "do not measure each workload's reference "
       "kernel (the baseline of dc-db report's speedup plot)")
      ("no-check", po::bool_switch(&no_check), "emulated tunes: skip the host-emulator check of "
       "the winners")
      ("no-cross-check", po::bool_switch(&no_cross_check), "with several workers of a GPU type: do not "
       "measure the finalists again on another worker, and quarantine nobody")
      ("quiet,q", po::bool_switch(&quiet), "no progress bar or stage lines; the summary only")
      ("insecure", po::bool_switch(&farm_flags.insecure), "--bind beyond loopback without CURVE: "
       "workers run the code they are sent, so only on a network you trust")
      ("curve-key", po::value(&farm_flags.curve_key), "--bind with CURVE: this coordinator's key "
       "pair file")
      ("allow-workers", po::value(&farm_flags.allow_workers), "--bind with CURVE: file of the "
       "workers' public keys allowed in");
  add_precision_options(desc);
  add_training_options(desc);
  const auto parsed = parse_command(args, desc, &model);
  if (!parsed) return kExitOk;
  const po::variables_map& vm = *parsed;
  const GpuCatalog catalog = GpuCatalog::builtin();
  DC_USER_CHECK(!model.empty(), "tune needs a model: dc-coordinator tune MODEL.onnx --gpus h100");
  DC_USER_CHECK(!gpu_list.empty(), "tune needs --gpus LIST (known: ",
                fmt::format("{}", fmt::join(catalog.names(), ", ")), ")");
  DC_USER_CHECK(farm_flags.local_workers >= 0, "--local-workers must be >= 0");
  DC_USER_CHECK(seed_k >= 0, "--seed-k must be >= 0");
  DC_USER_CHECK(db_timeout_s >= 0 && db_timeout_s <= 86400, "--db-timeout must be between 0 and 86400 seconds");
  DC_USER_CHECK(compile_deadline_s > 0 && compile_deadline_s <= 3600,
                "--compile-deadline must be more than 0 and at most 3600 seconds");

  TuneOptions opts;
  opts.gpus = parse_gpu_list(catalog, gpu_list);
  if (!config.empty()) load_tune_config(config, &opts.plan, &opts.calibration_from_db);
  if (no_db_calibration) opts.calibration_from_db = false;
  if (no_param_calibration) opts.calibration_params = false;
  if (rank_calibration) opts.calibration_rank = true;
  if (vm.count("within")) opts.plan.prune.within_factor = vm["within"].as<double>();
  if (vm.count("top-k")) opts.plan.prune.top_k = vm["top-k"].as<int>();
  read_precision_options(vm, &opts.plan, opts.gpus);
  opts.training = read_training_options(vm);
  DC_USER_CHECK(opts.plan.prune.within_factor >= 1, "--within must be >= 1");
  DC_USER_CHECK(opts.plan.prune.top_k >= 1, "--top-k must be >= 1");
  opts.import.input_shapes = parse_shape_flags(shapes);
  // OpenCL types: results carry over within clang's major version (the worker records the
  // clang it compiled with where CUDA workers record NVRTC's version).
  if (!opts.gpus.empty() && opts.gpus.front()->is_opencl())
    opts.nvrtc_major = toolchain_major(clang_version(opencl_clang_for("")));
  opts.retune = retune;
  opts.check_winners = !no_check;
  opts.cross_check = !no_cross_check;
  opts.measure_reference = !no_reference;
  opts.seed_k = seed_k;
  opts.compile_deadline = std::chrono::milliseconds(static_cast<int64_t>(compile_deadline_s * 1000));
  DC_USER_CHECK(run_deadline_s > 0 && run_deadline_s <= 3600,
                "--run-deadline must be more than 0 and at most 3600 seconds");
  opts.run_deadline = std::chrono::milliseconds(static_cast<int64_t>(run_deadline_s * 1000));
  const bool remote = !farm_flags.farm.empty();
  if (remote) {
    DC_USER_CHECK(farm_flags.bind.empty() && !vm.count("local-workers"),
                  "--farm tunes through a service: --bind and --local-workers do not apply");
    DC_USER_CHECK(vm["db"].defaulted(), "--farm: the service owns the tuning DB; --db does not apply");
    DC_USER_CHECK(farm_flags.priority >= 1 && farm_flags.priority <= 100, "--priority must be 1 to 100");
    DC_USER_CHECK(farm_flags.reconnect_s >= 0 && farm_flags.reconnect_s <= 86400,
                  "--farm-reconnect must be 0 to 86400 seconds");
    DC_USER_CHECK(farm_flags.farm_key.empty() == farm_flags.farm_server_key.empty(),
                  "CURVE needs both --farm-key and --farm-server-key");
  } else {
    DC_USER_CHECK(vm["priority"].defaulted() && farm_flags.farm_key.empty() && farm_flags.farm_server_key.empty(),
                  "--priority, --farm-key and --farm-server-key need --farm");
  }
  if (wait_s < 0) wait_s = farm_flags.bind.empty() && !remote ? 30 : 120;
  opts.worker_wait = std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000));
  opts.host = host_name();
  opts.options_json = options_json(gpu_list, opts.plan, farm_flags, retune, opts.calibration_from_db);
  opts.progress = quiet ? Progress::Mode::quiet : Progress::detect();
  opts.console = quiet ? nullptr : &std::cerr;
  opts.stop = &g_stop;

  std::unique_ptr<TuningDb> db;
  std::unique_ptr<Farm> farm;
  RemoteFarm* service = nullptr;
  if (remote) {
    // Lookups and results go through the service's DB (it answers what it knows at once
    // and records every result); this process keeps what the pipeline needs in memory.
    db = make_memory_db();
    RemoteFarmOptions ro;
    ro.endpoint = farm_flags.farm;
    ro.model = std::filesystem::path(model).stem() == "model"
                   ? std::filesystem::path(model).parent_path().filename().string()
                   : std::filesystem::path(model).stem().string();
    for (const GpuSpec* g : opts.gpus) ro.gpu_types.push_back(g->name);
    ro.priority = farm_flags.priority;
    ro.reconnect_timeout = std::chrono::milliseconds(static_cast<int64_t>(farm_flags.reconnect_s * 1000));
    if (!farm_flags.farm_key.empty()) {
      const farm::CurveKeyPair mine = farm::read_curve_keys(farm_flags.farm_key, /*need_secret=*/true);
      ro.client_public_key = mine.public_key;
      ro.client_secret_key = mine.secret_key;
      ro.server_public_key = farm::read_curve_keys(farm_flags.farm_server_key, /*need_secret=*/false).public_key;
    }
    auto rf = std::make_unique<RemoteFarm>(ro);
    service = rf.get();
    if (!quiet) std::cerr << fmt::format("tune: through the farm service at {} as tune {}, priority {}\n",
                                         ro.endpoint, rf->tune_id(), ro.priority);
    opts.emulated = farm_flags.emulate;
    farm = std::move(rf);
  } else {
    make_db_folder(db_path);
    sqlite::set_busy_timeout(std::chrono::milliseconds(static_cast<int64_t>(db_timeout_s * 1000)));
    db = open_tuning_db(db_path);  // before any worker starts
    std::ostringstream discard;
    farm = make_farm(farm_flags, opts.gpus, catalog, quiet ? static_cast<std::ostream&>(discard) : std::cerr,
                     &opts.emulated, opts.worker_wait);
  }

  g_stop.store(false);
  StopSignals signals;
  const TuneResult r = tune(model, *farm, *db, opts);
  farm->shutdown();

  // With --out, the summaries printed are those written (with the plan's lines).
  std::vector<TuneOutput> outputs;
  if (!out_dir.empty()) outputs = write_tune_outputs(r, out_dir);
  for (size_t i = 0; i < r.gpus.size(); ++i)
    std::cout << "\n" << (outputs.empty() ? tune_gpu_summary(r, r.gpus[i]) : outputs[i].summary);
  std::cout << tune_totals(r);
  for (const auto& o : outputs)
    if (!o.plan_dir.empty())
      std::cout << fmt::format("wrote plan {} (plan.json, kernels.cu, weights.bin, summary.txt)\n", o.plan_dir);
  if (!out_dir.empty()) std::cout << fmt::format("wrote {}/<gpu>/summary.txt and selection.json\n", out_dir);
  if (service != nullptr) {
    const RemoteFarmCounts c = service->counts();
    std::cout << fmt::format("farm service: {} jobs measured for this tune, {} shared with another tune, {} answered "
                             "from the service's DB\n", c.measured, c.joined, c.from_db);
    if (c.reconnects > 0)
      std::cout << fmt::format("farm service: lost and reached again {} time(s); {} job(s) submitted again\n",
                               c.reconnects, c.resubmitted);
  }
  for (const auto& g : r.gpus)
    if (!g.has_results())
      std::cerr << fmt::format("error: GPU type {} got no results{}\n", g.gpu->name,
                               g.workers == 0 ? " (no worker of this type)" : "");
  for (const auto& g : r.gpus)
    if (g.drift.untrusted)
      std::cerr << fmt::format("error: GPU type {}: a worker drifted over the tune and no steady worker was left to "
                               "measure again: its results of this run are not trusted (marked implausible); see the "
                               "DRIFT lines above\n", g.gpu->name);
  if (r.internal_error_jobs() > 0)
    std::cerr << fmt::format("error: {} jobs of {} workloads ended in internal_error (a bug in dc, not the "
                             "variants' fault): the tune is not ok; see the INTERNAL ERROR lines above\n",
                             r.internal_error_jobs(), r.internal_error_workloads());
  if (r.interrupted) return kExitInterrupted;
  return r.complete() ? kExitOk : kExitCheckFailed;
}

}  // namespace dc::cli
