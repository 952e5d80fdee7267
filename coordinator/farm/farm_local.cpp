#include "farm_local.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "farm_security.h"

namespace dc {
namespace {

using Clock = std::chrono::steady_clock;

std::string exit_text(int status) {
  if (WIFSIGNALED(status)) return str_cat("killed by signal ", WTERMSIG(status));
  if (WIFEXITED(status)) return str_cat("exit status ", WEXITSTATUS(status));
  return "ended";
}

}  // namespace

std::string default_worker_binary() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  DC_USER_CHECK(!ec, "cannot find this executable (/proc/self/exe): ", ec.message());
  const std::filesystem::path worker = self.parent_path() / "dc-worker";
  DC_USER_CHECK(::access(worker.c_str(), X_OK) == 0, "dc-worker not found next to ", self.string(),
                " (build the dc-worker target, or give the worker binary)");
  return worker.string();
}

LocalFarm::LocalFarm(LocalFarmOptions options) : options_(std::move(options)) {
  DC_USER_CHECK(farm::is_loopback_endpoint(options_.broker.endpoint), "a local farm binds to loopback only, not ",
                options_.broker.endpoint);
  DC_USER_CHECK(!options_.emulate || !options_.gpu_types.empty(), "an emulated local farm needs GPU types");
  DC_USER_CHECK(options_.workers >= 0, "negative worker count");
  const std::string binary = options_.worker_binary.empty() ? default_worker_binary() : options_.worker_binary;
  // Emulated and real measurements never mix in one farm.
  options_.broker.require_emulated = options_.emulate;
  broker_ = std::make_unique<FarmBroker>(options_.broker);

  std::vector<std::string> common = {binary,
                                     "--connect", broker_->endpoint(),
                                     "--heartbeat-ms", std::to_string(options_.broker.heartbeat.count()),
                                     "--log-level", options_.worker_log_level};
  if (options_.credits > 0) common.insert(common.end(), {"--credits", std::to_string(options_.credits)});
  if (options_.builders >= 0) common.insert(common.end(), {"--builders", std::to_string(options_.builders)});
  if (!options_.cache_dir.empty()) {
    common.push_back("--cache");
    common.push_back(options_.cache_dir);
  }
  try {
    if (options_.emulate) {
      const int per_type = std::max(1, options_.workers);
      for (const std::string& type : options_.gpu_types)
        for (int i = 0; i < per_type; ++i) {
          std::vector<std::string> argv = common;
          argv.insert(argv.end(), {"--emulate", type, "--worker-id", str_cat("local-", type, "-", i + 1)});
          workers_.push_back({spawn(argv), str_cat(type, " #", i + 1), 1});
        }
    } else if (!options_.opencl_devices.empty()) {
      for (int d : options_.devices) {
        std::vector<std::string> argv = common;
        argv.insert(argv.end(), {"--device", std::to_string(d), "--worker-id", str_cat("local-gpu", d)});
        workers_.push_back({spawn(argv), str_cat("GPU ", d), 1});
      }
      for (int d : options_.opencl_devices) {
        std::vector<std::string> argv = common;
        argv.insert(argv.end(), {"--opencl", std::to_string(d), "--worker-id", str_cat("local-opencl", d)});
        workers_.push_back({spawn(argv), str_cat("OpenCL ", d), 1});
      }
    } else if (options_.devices.empty()) {
      std::vector<std::string> argv = common;
      argv.insert(argv.end(), {"--worker-id", "local-gpus"});
      workers_.push_back({spawn(argv), "all GPUs", 1});
    } else {
      for (int d : options_.devices) {
        std::vector<std::string> argv = common;
        argv.insert(argv.end(), {"--device", std::to_string(d), "--worker-id", str_cat("local-gpu", d)});
        workers_.push_back({spawn(argv), str_cat("GPU ", d), 1});
      }
    }
  } catch (...) {
    shutdown();
    throw;
  }
  spdlog::info("farm: started {} local dc-worker process(es) on {}", workers_.size(), broker_->endpoint());
}

LocalFarm::~LocalFarm() { shutdown(); }

pid_t LocalFarm::spawn(const std::vector<std::string>& argv_in) {
  std::vector<std::string> argv = argv_in;
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  DC_USER_CHECK(pid >= 0, "fork failed: ", std::strerror(errno));
  if (pid == 0) {
    // A worker outlives no coordinator: SIGTERM (finish the job in hand) when it goes.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(126);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

void LocalFarm::reap_exited() {
  for (Worker& w : workers_) {
    if (w.pid <= 0) continue;
    int status = 0;
    if (::waitpid(w.pid, &status, WNOHANG) == w.pid) {
      const std::string how = exit_text(status);
      if (!shut_down_) spdlog::warn("farm: local worker {} (pid {}) ended: {}", w.label, w.pid, how);
      exits_.push_back(w.label + ": " + how);
      w.pid = 0;
    }
  }
}

int LocalFarm::wait_for_workers(std::chrono::milliseconds timeout) {
  int expected = 0;
  for (const Worker& w : workers_) expected += w.devices;
  const auto until = Clock::now() + timeout;
  int joined = 0;
  while (true) {
    joined = 0;
    for (const auto& [type, n] : broker_->status().workers_per_gpu_type) joined += n;
    reap_exited();
    const bool any_alive = std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.pid > 0; });
    if (!any_alive && joined == 0) {
      std::string how;
      for (const std::string& e : exits_) how += (how.empty() ? "" : "; ") + e;
      throw_user_error("every local dc-worker exited (", how, "); run dc-worker by hand to see why");
    }
    if (joined >= expected || Clock::now() >= until) return joined;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<pid_t> LocalFarm::worker_pids() const {
  std::vector<pid_t> out;
  for (const Worker& w : workers_)
    if (w.pid > 0) out.push_back(w.pid);
  return out;
}

void LocalFarm::submit(FarmJob job) { broker_->submit(std::move(job)); }
std::vector<Measurement> LocalFarm::collect(std::chrono::milliseconds timeout) { return broker_->collect(timeout); }
FarmStatus LocalFarm::status() const { return broker_->status(); }

void LocalFarm::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // Workers first, while the broker still takes their last results and Byes.
  for (const Worker& w : workers_)
    if (w.pid > 0) ::kill(w.pid, SIGTERM);
  const auto until = Clock::now() + options_.stop_grace;
  while (Clock::now() < until) {
    reap_exited();
    if (std::none_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.pid > 0; })) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (Worker& w : workers_)
    if (w.pid > 0) {
      spdlog::warn("farm: local worker {} did not stop in time; killed", w.label);
      ::kill(w.pid, SIGKILL);
      int status = 0;
      ::waitpid(w.pid, &status, 0);
      w.pid = 0;
    }
  if (broker_) broker_->shutdown();
}

std::unique_ptr<LocalFarm> make_local_farm(LocalFarmOptions options) {
  return std::make_unique<LocalFarm>(std::move(options));
}

}  // namespace dc
