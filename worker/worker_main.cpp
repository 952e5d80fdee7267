// dc-worker: the measurement daemon of one GPU node (docs/farm.md).
//
//   dc-worker --connect tcp://HOST:PORT [--device N ...] [--emulate GPU ...] [--cache DIR]
//             [--config FILE] [--credits N] [--builders N] [--server-key FILE --key FILE]
//
// It finds the machine's GPUs through the CUDA driver (loaded at run time), or serves
// emulated ones, says what it found, connects to the coordinator and measures the jobs it is
// sent, each GPU's in its own measurement child, while a pool of compile processes (the
// builders, builder_pool.h) compiles the jobs it holds ahead of them. SIGINT/SIGTERM: finish the jobs in hand,
// send their results, say Bye; a second signal stops at once.
//
// Exit codes: 0 stopped; 1 refused by the coordinator; 2 bad usage or setup (no device);
// 3 internal error.
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include <boost/program_options.hpp>

#include "builder_pool.h"
#include "device_discovery.h"
#include "farm_client.h"
#include "farm_security.h"
#include "ir/error.h"
#include "ir/log.h"
#include "job_executor.h"
#include "measure_child.h"
#include "opencl_device.h"
#include "worker_devices.h"

namespace po = boost::program_options;

namespace dc {
namespace {

constexpr int kExitRefused = 1;
constexpr int kExitUser = 2;
constexpr int kExitInternal = 3;

std::atomic<FarmClient*> g_client{nullptr};
std::atomic<int> g_signals{0};

extern "C" void on_signal(int) {
  // First: finish what is in hand. Second: abandon it. Third: leave now.
  if (g_signals.fetch_add(1) >= 2) std::_Exit(130);
  if (FarmClient* c = g_client.load()) c->stop();
}

std::string default_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return (std::filesystem::path(xdg) / "dc" / "worker").string();
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return (std::filesystem::path(home) / ".cache" / "dc" / "worker").string();
  return (std::filesystem::temp_directory_path() / "dc-worker-cache").string();
}

std::string self_exe() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  DC_USER_CHECK(!ec, "cannot find this executable (/proc/self/exe): ", ec.message());
  return p.string();
}

struct Settings {
  std::string connect;
  std::vector<int> devices;
  std::vector<int> opencl;  // OpenCL device indices (--opencl)
  std::vector<std::string> emulate;
  std::string cache;
  int credits = -1;        // -1: 1 plus the builders' share
  int builders = -1;       // -1: $DC_WORKER_BUILDERS, else the machine's cores
  int heartbeat_ms = 1000;
  std::string server_key;  // file with the coordinator's public key
  std::string key;         // file with this worker's key pair
  std::string log_level = "info";
  std::string worker_id;
  std::string cpu_timing;  // "" = $DC_WORKER_CPU_TIMING, else paired
};

// The config file: the same names as the flags (connect, device, emulate, cache, credits,
// builders, heartbeat_ms, server_key, key, log_level, worker_id, cpu_timing); flags given on the command line win.
void load_config(const std::string& path, const po::variables_map& given, Settings* s) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw_user_error("--config ", path, ": ", e.what());
  }
  DC_USER_CHECK(root.IsMap() || root.IsNull(), "--config ", path, ": expected a mapping of settings");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    const std::string flag = key == "heartbeat_ms" ? "heartbeat-ms"
                             : key == "server_key" ? "server-key"
                             : key == "log_level"  ? "log-level"
                             : key == "worker_id"  ? "worker-id"
                             : key == "cpu_timing" ? "cpu-timing"
                                                   : key;
    if (given.count(flag) && !given[flag].defaulted()) continue;
    try {
      if (key == "connect") s->connect = v.as<std::string>();
      else if (key == "device") s->devices = v.IsSequence() ? v.as<std::vector<int>>() : std::vector<int>{v.as<int>()};
      else if (key == "emulate")
        s->emulate = v.IsSequence() ? v.as<std::vector<std::string>>() : std::vector<std::string>{v.as<std::string>()};
      else if (key == "cache") s->cache = v.as<std::string>();
      else if (key == "credits") s->credits = v.as<int>();
      else if (key == "builders") s->builders = v.as<int>();
      else if (key == "heartbeat_ms") s->heartbeat_ms = v.as<int>();
      else if (key == "server_key") s->server_key = v.as<std::string>();
      else if (key == "key") s->key = v.as<std::string>();
      else if (key == "log_level") s->log_level = v.as<std::string>();
      else if (key == "worker_id") s->worker_id = v.as<std::string>();
      else if (key == "cpu_timing") s->cpu_timing = v.as<std::string>();
      else
        throw_user_error("--config ", path, ": unknown key '", key,
                         "' (connect, device, emulate, cache, credits, builders, heartbeat_ms, server_key, key, log_level, "
                         "worker_id, cpu_timing)");
    } catch (const YAML::Exception& e) {
      throw_user_error("--config ", path, ": bad value for '", key, "': ", e.what());
    }
  }
}

// The emulated device's test faults (job_executor.h's EmulatedFaults; docs/farm.md): the one
// place dc reads them, so that no test hook hides elsewhere.
EmulatedFaults test_faults_from_environment() {
  EmulatedFaults f;
  if (const char* e = std::getenv("DC_TEST_INTERNAL_ERROR")) f.internal_error_on = e;
  if (const char* e = std::getenv("DC_TEST_TIME_FACTOR")) {
    char* end = nullptr;
    f.time_factor = std::strtod(e, &end);
    DC_USER_CHECK(end != e && *end == '\0' && f.time_factor > 0, "DC_TEST_TIME_FACTOR='", e, "' is not a positive number");
  }
  if (const char* e = std::getenv("DC_TEST_TIME_DRIFT")) {  // "F/N": to F x over the first N jobs
    char* end = nullptr;
    f.drift_factor = std::strtod(e, &end);
    const bool factor_ok = end != e && *end == '/' && f.drift_factor > 0;
    const char* jobs = factor_ok ? end + 1 : e;
    const long n = std::strtol(jobs, &end, 10);
    DC_USER_CHECK(factor_ok && end != jobs && *end == '\0' && n > 0 && n < (1 << 30), "DC_TEST_TIME_DRIFT='", e,
                  "' is not F/N (times grow to F x over the first N jobs, e.g. 2/20)");
    f.drift_jobs = static_cast<int>(n);
  }
  if (!f.internal_error_on.empty() || f.time_factor != 1 || f.drift_factor != 1)
    spdlog::warn("TEST FAULTS planted in this emulated device: internal_error on '{}', times x{}, drifting to x{} "
                 "over {} jobs", f.internal_error_on, f.time_factor, f.drift_factor, f.drift_jobs);
  return f;
}

// --list-devices without --device: every device the driver reports, an unusable one with
// its reason (no NVRTC for its arch: what to install). Exit 2 when none can be served.
int list_real_devices(const GpuCatalog& catalog) {
  std::string why;
  const std::vector<DiscoveredDevice> found = discover_devices(catalog, &why);
  if (found.empty()) {
    std::cout << "no GPU to serve: " << why << "\n";
    return 2;
  }
  for (const DiscoveredDevice& d : found) std::cout << describe_device(d) << "\n";
  return std::any_of(found.begin(), found.end(), [](const DiscoveredDevice& d) { return d.usable(); }) ? 0 : 2;
}

// Paired timing on a CPU device (TimingOptions::pair_cpu_timings) unless DC_WORKER_CPU_TIMING
// says alone; the worker checked --cpu-timing, and an unknown value here is a user error too.
bool cpu_timing_paired() {
  const char* v = std::getenv("DC_WORKER_CPU_TIMING");
  const std::string mode = v && *v ? v : "paired";
  DC_USER_CHECK(mode == "paired" || mode == "alone", "DC_WORKER_CPU_TIMING must be paired or alone, not '", mode, "'");
  return mode == "paired";
}

// A measurement child (--measure-child: compile, check, time) or a builder's compile child
// (--compile-child: the compile phase only), serving one device's jobs on fd 3.
int measure_child_main(const std::string& device_hex, const std::string& cache, const std::string& log_level,
                       bool compile_only) {
  init_logging(log_level);
  ExecutorConfig config;
  config.device = inventory_from_hex(device_hex);
  config.cache_dir = cache;
  config.ordinal = config.device.device_index();
  const GpuCatalog catalog = GpuCatalog::builtin();
  if (const GpuSpec* spec = catalog.find(config.device.gpu_type())) config.spec = *spec;
  else DC_USER_CHECK(!config.device.emulated(), "unknown GPU type ", config.device.gpu_type());
  if (config.device.emulated()) config.faults = test_faults_from_environment();
  config.timing.pair_cpu_timings = cpu_timing_paired();
  if (!config.device.emulated() && config.device.api() != "opencl" && !compile_only) {
    // DC_NVML_LIBRARY: another NVML (the tests' fake); by default the driver's.
    const char* lib = std::getenv("DC_NVML_LIBRARY");
    config.nvml = Nvml::load(lib && *lib ? lib : "libnvidia-ml.so.1", &config.no_nvml);
    if (!config.nvml)
      spdlog::warn("device {}: no NVML ({}): results carry no health data and throttling goes unnoticed",
                   config.ordinal, config.no_nvml);
  }
  JobExecutor executor(config);
  return serve_measure_child(
      3,
      [&](const farm::Job& job, const std::function<void()>& compiled) {
        return execute_wire_job(executor, job, compiled, compile_only);
      },
      [&] { return executor.must_restart(); });
}

int worker_main(int argc, char** argv) {
  Settings s;
  std::string config_file, child_device;
  po::options_description visible("dc-worker --connect tcp://HOST:PORT [options]");
  visible.add_options()
      ("help,h", "this help")
      ("list-devices", "print the devices this worker would serve (with --device or --emulate: those) and exit; "
       "exit status 2 when there are none")
      ("connect", po::value(&s.connect), "the coordinator's endpoint, tcp://HOST:PORT")
      ("device", po::value(&s.devices)->multitoken(), "CUDA device ordinals to serve (default: all usable)")
      ("opencl", po::value(&s.opencl)->multitoken(),
       "OpenCL device indices to serve (--list-devices shows them; PoCL's CPU device is pocl-cpu); without "
       "--device, only these")
      ("emulate", po::value(&s.emulate)->multitoken(),
       "serve an emulated GPU of this canonical type (h100, a100, ...; repeat for several): times come from "
       "a timing model, not a GPU")
      ("cache", po::value(&s.cache), "compile cache directory (default: ~/.cache/dc/worker)")
      ("config", po::value(&config_file), "YAML file with these settings (flags win)")
      ("credits", po::value(&s.credits), "jobs per device held at once (default: 1, plus the builders' "
       "share, so that they have jobs to compile ahead)")
      ("builders", po::value(&s.builders), "compile processes that compile held jobs ahead of the "
       "measurement (default: $DC_WORKER_BUILDERS, else this machine's cores; 0: none)")
      ("heartbeat-ms", po::value(&s.heartbeat_ms)->default_value(1000), "heartbeat until the coordinator sets it")
      ("server-key", po::value(&s.server_key), "CURVE: file with the coordinator's public key (pinned)")
      ("key", po::value(&s.key), "CURVE: file with this worker's key pair")
      ("worker-id", po::value(&s.worker_id), "name in the coordinator's logs (default host/pid)")
      ("cpu-timing", po::value(&s.cpu_timing),
       "paired or alone: on a CPU device (pocl-cpu), time each variant in turns with the first one timed for "
       "its workload and scale its samples by that anchor's drift (default: $DC_WORKER_CPU_TIMING, else "
       "paired; docs/opencl.md, \"Paired timing\")")
      ("log-level", po::value(&s.log_level)->default_value("info"), "trace, debug, info, warn, error, off");
  po::options_description hidden;
  hidden.add_options()("measure-child", "internal: serve one device's jobs on fd 3")(
      "compile-child", "internal: compile one device's jobs on fd 3 (a builder)")(
      "child-device", po::value(&child_device), "internal: the device (serialized inventory, hex)");
  po::options_description all;
  all.add(visible).add(hidden);
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, all), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw_user_error(e.what(), " (see dc-worker --help)");
  }
  if (vm.count("help")) {
    std::cout << visible << "\n";
    return 0;
  }
  if (vm.count("measure-child") || vm.count("compile-child"))
    return measure_child_main(child_device, s.cache, s.log_level, vm.count("compile-child") != 0);
  if (!config_file.empty()) load_config(config_file, vm, &s);
  init_logging(s.log_level);
  const bool list_only = vm.count("list-devices") != 0;
  DC_USER_CHECK(list_only || !s.connect.empty(), "--connect tcp://HOST:PORT is required (see dc-worker --help)");
  DC_USER_CHECK(s.devices.empty() || s.emulate.empty(), "--device and --emulate exclude each other");
  DC_USER_CHECK(s.opencl.empty() || s.emulate.empty(), "--opencl and --emulate exclude each other");
  if (s.cache.empty()) s.cache = default_cache_dir();
  if (!s.cpu_timing.empty()) {
    DC_USER_CHECK(s.cpu_timing == "paired" || s.cpu_timing == "alone", "--cpu-timing must be paired or alone, not '",
                  s.cpu_timing, "'");
    setenv("DC_WORKER_CPU_TIMING", s.cpu_timing.c_str(), 1);  // read by the measurement children
  }
  (void)cpu_timing_paired();  // a bad $DC_WORKER_CPU_TIMING is an error here, not in every child

  // ---- devices ----
  const GpuCatalog catalog = GpuCatalog::builtin();
  std::vector<farm::GpuInventory> inventory;
  if (!s.emulate.empty()) {
    for (size_t i = 0; i < s.emulate.size(); ++i)
      inventory.push_back(emulated_inventory(catalog, s.emulate[i], static_cast<int>(i)));
    spdlog::info("dc-worker: serving {} EMULATED device(s): times are modelled, not measured", inventory.size());
  } else if (list_only && s.devices.empty() && s.opencl.empty()) {
    // Every device this machine has: CUDA's, then OpenCL's (indices as --opencl takes them).
    std::string why_cuda, why_cl;
    for (const auto& g : real_inventory(catalog, {}, &why_cuda)) std::cout << describe_inventory(g) << "\n";
    if (!why_cuda.empty()) std::cout << "no CUDA device: " << why_cuda << "\n";
    const auto cl = ocl::list_devices(catalog, &why_cl);
    for (const auto& d : cl) std::cout << "opencl " << d.index << ": " << ocl::describe(d) << "\n";
    if (cl.empty()) std::cout << "no OpenCL device: " << why_cl << "\n";
    return why_cuda.empty() || !cl.empty() ? 0 : 2;
  } else {
    std::string why;
    if (list_only && s.devices.empty() && s.opencl.empty()) return list_real_devices(catalog);
    if (s.opencl.empty() || !s.devices.empty()) inventory = real_inventory(catalog, s.devices, &why);
    if (!s.opencl.empty()) {
      std::string why_cl;
      for (auto& g : opencl_inventory(catalog, s.opencl, &why_cl)) inventory.push_back(std::move(g));
      if (inventory.empty()) why = why_cl;
    }
    if (list_only && inventory.empty()) {
      std::cout << "no GPU to serve: " << why << "\n";
      return 2;
    }
    DC_USER_CHECK(!inventory.empty(), "no GPU to serve: ", why, ". Use --emulate GPU (e.g. --emulate h100) to "
                  "serve an emulated device, or --opencl N for an OpenCL one");
  }
  if (list_only) {
    for (const auto& g : inventory) std::cout << describe_inventory(g) << "\n";
    return 0;
  }
  for (const auto& g : inventory) spdlog::info("dc-worker: device {}", describe_inventory(g));

  // ---- builders ----
  const bool host_cpu_device = serves_host_cpu_device(inventory, catalog);
  if (s.builders < 0) {
    const char* env = std::getenv("DC_WORKER_BUILDERS");
    if (env != nullptr && *env != '\0') {
      try {
        s.builders = std::stoi(env);
      } catch (const std::exception&) {
        throw_user_error("DC_WORKER_BUILDERS must be a number, not '", env, "'");
      }
    } else {
      // A device that computes on this machine's own cores (PoCL's CPU device) is timed on
      // the cores the builders would compile on, so such a worker compiles in the
      // measurement child, one job after another, and its timings are the device's alone.
      s.builders = default_builders(inventory, catalog, std::thread::hardware_concurrency());
    }
  }
  DC_USER_CHECK(s.builders >= 0, "--builders must be >= 0");
  if (host_cpu_device && s.builders > 0)
    spdlog::warn("dc-worker: {} builder(s) will compile on the cores that the CPU device measures on: its "
                 "timings will include their contention (--builders 0, the default for a CPU device, avoids it)",
                 s.builders);
  // Without an explicit --credits, each device holds one job to measure plus its share of
  // the builders' work, so that the builders have jobs to compile ahead.
  const int devices = static_cast<int>(inventory.size());
  if (s.credits < 0) s.credits = 1 + (s.builders + devices - 1) / devices;
  DC_USER_CHECK(s.credits >= 1, "--credits must be >= 1");

  // ---- security ----
  FarmClientOptions options;
  options.endpoint = s.connect;
  options.worker_id = s.worker_id;
  options.credits = s.credits;
  options.heartbeat = std::chrono::milliseconds(s.heartbeat_ms);
  DC_USER_CHECK(s.server_key.empty() == s.key.empty(), "CURVE needs both --server-key and --key");
  if (!s.key.empty()) {
    options.server_public_key = farm::read_curve_keys(s.server_key, false).public_key;
    const farm::CurveKeyPair mine = farm::read_curve_keys(s.key, true);
    options.public_key = mine.public_key;
    options.secret_key = mine.secret_key;
    spdlog::info("dc-worker: CURVE on; this worker's public key is {}", mine.public_key);
  }

  // ---- builders, then measurement children, one per device ----
  const std::string exe = self_exe();
  std::unique_ptr<BuilderPool> builders;
  if (s.builders > 0) {
    builders = std::make_unique<BuilderPool>(s.builders, [&exe, &inventory, &s](int32_t device) {
      for (const auto& g : inventory)
        if (g.device_index() == device) {
          std::vector<std::string> child = measure_child_argv(exe, g, s.cache, s.log_level);
          std::replace(child.begin(), child.end(), std::string("--measure-child"), std::string("--compile-child"));
          return child;
        }
      throw_internal_error("builder: no device ", device);
    });
    options.on_job_received = [b = builders.get()](const farm::Job& job) { b->submit(job); };
    spdlog::info("dc-worker: {} builder(s) compile ahead; {} job(s) held per device", s.builders, s.credits);
  } else if (host_cpu_device) {
    spdlog::info("dc-worker: no builders: a CPU device's jobs compile in its measurement child, off its timings");
  }
  std::vector<std::unique_ptr<MeasureChild>> children;
  std::vector<JobRunner> runners;
  for (const auto& g : inventory) {
    children.push_back(std::make_unique<MeasureChild>(measure_child_argv(exe, g, s.cache, s.log_level)));
    MeasureChild* child = children.back().get();
    runners.push_back([child, b = builders.get()](const farm::Job& job) {
      if (b != nullptr)
        if (std::optional<farm::Result> verdict = b->take(job)) return *verdict;
      return child->run(job);
    });
  }

  FarmClient client(options, inventory, std::move(runners));
  g_client.store(&client);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  spdlog::info("dc-worker: connecting to {}", s.connect);
  const FarmClient::Outcome outcome = client.run();
  g_client.store(nullptr);
  if (outcome == FarmClient::Outcome::refused) {
    std::cerr << "dc-worker: refused by the coordinator: " << client.refusal() << "\n";
    return kExitRefused;
  }
  spdlog::info("dc-worker: stopped after {} job(s)", client.stats().jobs_done);
  if (g_signals.load() >= 2) {
    // Jobs were abandoned: their children die with this process (PR_SET_PDEATHSIG);
    // waiting for them to end is what the second signal asked not to do.
    spdlog::default_logger()->flush();
    std::_Exit(130);
  }
  return 0;
}

}  // namespace
}  // namespace dc

int main(int argc, char** argv) {
  try {
    return dc::worker_main(argc, argv);
  } catch (const dc::UserError& e) {
    std::cerr << "dc-worker: " << e.what() << "\n";
    return dc::kExitUser;
  } catch (const std::exception& e) {
    std::cerr << "dc-worker: internal error: " << e.what() << "\n";
    return dc::kExitInternal;
  }
}
