// The whole farm on loopback: a LocalFarm (broker + dc-worker processes with emulated
// devices, each measuring in its own child) doing real jobs, while workers are killed and
// kernels hang or fault. Every job must end exactly once.
#include <signal.h>
#include <unistd.h>

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "farm_local.h"
#include "farm_testing.h"

namespace dc {
namespace {

using namespace std::chrono_literals;
using testing::collect_n;
using testing::scale_job;

// A loop each of the 1000 threads runs on the host emulator: a few hundred ms per job.
const char* const kSpin = "  volatile float spin = 0.f;\n  for (int k = 0; k < 100000; ++k) spin += 1.f;\n";

LocalFarmOptions local_options(std::vector<std::string> types, int per_type) {
  LocalFarmOptions o;
  o.emulate = true;
  o.gpu_types = std::move(types);
  o.workers = per_type;
  o.worker_binary = std::string(DC_BIN_DIR) + "/dc-worker";
  o.cache_dir = ::testing::TempDir() + "dc-farm-test-cache";
  o.worker_log_level = "error";
  o.broker.heartbeat = 200ms;  // a killed worker is noticed after 600 ms
  // One job held per worker (not the default 1 + builders' share): the tests below count
  // the jobs in flight and the ones a lost worker takes with it.
  o.credits = 1;
  return o;
}

std::string tag() { return std::to_string(std::random_device{}()) + "-" + std::to_string(::getpid()); }

TEST(LocalFarm, KilledWorkerLosesNoJobAndDuplicatesNone) {
  LocalFarm farm(local_options({"h100"}, 3));
  ASSERT_EQ(farm.wait_for_workers(testing::scaled(20s)), 3);
  const int n = 9;
  const std::string run = tag();
  for (int i = 0; i < n; ++i) {
    // Distinct sources (a fresh compile each), checked on the emulator: slow enough that
    // every worker holds a job when one dies.
    FarmJob j = scale_job("job" + std::to_string(i), "h100", kSpin, run + "/" + std::to_string(i));
    j.check_on_emulator = true;
    farm.submit(j);
  }
  ASSERT_TRUE(testing::eventually([&] { return farm.status().in_flight >= 3; }, 5s));
  ASSERT_EQ(farm.status().in_flight, 3);
  const std::vector<pid_t> pids = farm.worker_pids();
  ASSERT_EQ(pids.size(), 3u);
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);

  const auto ms = collect_n(farm, n, 60s);
  ASSERT_EQ(ms.size(), static_cast<size_t>(n));
  std::map<std::string, int> seen;
  int retried = 0;
  for (const Measurement& m : ms) {
    ++seen[m.variant_key];
    EXPECT_EQ(m.status, JobStatus::ok) << m.variant_key << ": " << m.error;
    EXPECT_TRUE(m.emulated);
    EXPECT_EQ(m.samples_us.size(), 10u);
    EXPECT_GT(m.median_us, 0);
    if (m.attempts == 2) ++retried;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n));
  for (const auto& [key, count] : seen) EXPECT_EQ(count, 1) << key;
  EXPECT_EQ(retried, 1) << "the killed worker's job ran again";
  EXPECT_TRUE(collect_n(farm, 1, 300ms).empty());
  EXPECT_EQ(farm.status().workers_per_gpu_type.at("h100"), 2);
  farm.shutdown();
  EXPECT_TRUE(farm.worker_pids().empty());
}

TEST(LocalFarm, FrozenWorkerIsReplacedThenRejoinsWithoutDuplicates) {
  LocalFarm farm(local_options({"h100"}, 2));
  ASSERT_EQ(farm.wait_for_workers(testing::scaled(20s)), 2);
  const std::string run = tag();
  for (int i = 0; i < 4; ++i) {
    FarmJob j = scale_job("job" + std::to_string(i), "h100", kSpin, run + "/" + std::to_string(i));
    j.check_on_emulator = true;
    farm.submit(j);
  }
  ASSERT_TRUE(testing::eventually([&] { return farm.status().in_flight == 2; }, 10s));
  const pid_t frozen = farm.worker_pids().at(0);
  ASSERT_EQ(::kill(frozen, SIGSTOP), 0);  // silent, not dead: its job goes to the other worker
  const auto ms = collect_n(farm, 4, 40s);
  ASSERT_EQ(::kill(frozen, SIGCONT), 0);
  ASSERT_EQ(ms.size(), 4u);
  std::set<std::string> keys;
  int retried = 0;
  for (const Measurement& m : ms) {
    keys.insert(m.variant_key);
    EXPECT_EQ(m.status, JobStatus::ok) << m.error;
    retried += m.attempts == 2;
  }
  EXPECT_EQ(keys.size(), 4u);
  EXPECT_EQ(retried, 1);
  // Thawed, it says Hello again (told it is unknown, or finding the coordinator silent) and
  // serves. The job it held was requeued: it finishes it late (the result is ignored) or, when
  // its own silence check fires before its I/O thread has read the job off the wire, drops it
  // with the old socket (seen under TSan on a loaded machine). Either way nothing counts
  // twice; FarmBroker.SilentWorkersJobIsRequeuedToAnother checks the late result exactly.
  EXPECT_TRUE(testing::eventually([&] { return farm.status().workers_per_gpu_type.at("h100") == 2; }, 15s));
  (void)testing::eventually([&] { return farm.broker().counters().ignored_results >= 1; }, 5s);
  EXPECT_LE(farm.broker().counters().ignored_results, 1);
  EXPECT_TRUE(collect_n(farm, 1, 300ms).empty());
  farm.submit(scale_job("after", "h100"));
  farm.submit(scale_job("after2", "h100"));
  EXPECT_EQ(collect_n(farm, 2, 20s).size(), 2u);
}

TEST(LocalFarm, HangsAndFaultsDoNotStopAWorker) {
  LocalFarm farm(local_options({"h100"}, 1));
  ASSERT_EQ(farm.wait_for_workers(testing::scaled(20s)), 1);
  FarmJob hang = scale_job("hang", "h100", "  volatile int forever = 1;\n  while (forever) {}\n");
  hang.check_on_emulator = true;
  hang.run_deadline = 1500ms;
  FarmJob fault = scale_job("fault", "h100", "  if (i == 0) y[1000] = 1.f;\n");
  fault.check_on_emulator = true;
  FarmJob good = scale_job("good", "h100");
  good.check_on_emulator = true;
  farm.submit(hang);
  farm.submit(fault);
  farm.submit(good);
  const auto ms = collect_n(farm, 3, 30s);
  ASSERT_EQ(ms.size(), 3u);
  std::map<std::string, Measurement> by_job;
  for (const Measurement& m : ms) by_job[m.variant_key] = m;
  EXPECT_EQ(by_job.at("var-hang").status, JobStatus::timeout) << by_job.at("var-hang").error;
  EXPECT_EQ(by_job.at("var-fault").status, JobStatus::runtime_fault);
  EXPECT_NE(by_job.at("var-fault").error.find("out-of-bounds access at element 1000 of buffer 1 't1'"),
            std::string::npos)
      << by_job.at("var-fault").error;
  EXPECT_EQ(by_job.at("var-good").status, JobStatus::ok) << by_job.at("var-good").error;
  // One worker did all three, each once.
  EXPECT_EQ(by_job.at("var-hang").worker, by_job.at("var-good").worker);
  EXPECT_EQ(by_job.at("var-fault").worker, by_job.at("var-good").worker);
  for (const auto& [k, m] : by_job) EXPECT_EQ(m.attempts, 1) << k;
  EXPECT_EQ(farm.worker_pids().size(), 1u);
}

TEST(LocalFarm, EachTypeGoesToItsOwnWorkers) {
  LocalFarm farm(local_options({"h100", "a100"}, 1));
  ASSERT_EQ(farm.wait_for_workers(testing::scaled(20s)), 2);
  const FarmStatus st = farm.status();
  EXPECT_EQ(st.emulated_workers_per_gpu_type.at("h100"), 1);
  EXPECT_EQ(st.emulated_workers_per_gpu_type.at("a100"), 1);
  for (int i = 0; i < 3; ++i) {
    farm.submit(scale_job("h" + std::to_string(i), "h100"));
    farm.submit(scale_job("a" + std::to_string(i), "a100"));
  }
  farm.submit(scale_job("nobody", "t4"));
  const auto ms = collect_n(farm, 6, 30s);
  ASSERT_EQ(ms.size(), 6u);
  for (const Measurement& m : ms) {
    EXPECT_EQ(m.status, JobStatus::ok) << m.error;
    EXPECT_EQ(m.worker, "local-" + m.gpu_type + "-1/0");
  }
  // The same kernel is modelled differently on the two GPU types.
  std::map<std::string, double> median;
  for (const Measurement& m : ms) median[m.gpu_type] = m.median_us;
  EXPECT_NE(median["h100"], median["a100"]);
  EXPECT_EQ(farm.status().queued, 1);  // t4: nobody serves it
}

TEST(LocalFarm, SigtermFinishesTheJobInHandThenTheWorkerLeaves) {
  LocalFarm farm(local_options({"h100"}, 1));
  ASSERT_EQ(farm.wait_for_workers(testing::scaled(20s)), 1);
  FarmJob slow = scale_job("slow", "h100", kSpin, "sigterm " + tag());
  slow.check_on_emulator = true;
  farm.submit(slow);
  ASSERT_TRUE(testing::eventually([&] { return farm.status().in_flight == 1; }, 10s));
  // In flight means sent, not received: a job still on the wire when the signal lands is
  // requeued (Bye), not run. Give it time to arrive; the NVRTC compile and the emulated
  // spin keep it in hand well past this.
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(::kill(farm.worker_pids().at(0), SIGTERM), 0);
  const auto ms = collect_n(farm, 1, 20s);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].status, JobStatus::ok) << ms[0].error;
  EXPECT_EQ(ms[0].attempts, 1);
  // Then Bye: the session ends at once, not after the heartbeat silence.
  EXPECT_TRUE(testing::eventually([&] { return farm.status().workers_per_gpu_type.count("h100") == 0; }, 1s));
}

TEST(LocalFarm, WorkerReadsItsConfigFile) {
  FarmBrokerOptions o;
  o.heartbeat = 200ms;
  FarmBroker broker(o);
  const std::string path = ::testing::TempDir() + "dc-worker-" + tag() + ".yaml";
  std::ofstream(path) << "connect: " << broker.endpoint() << "\nemulate: [a100, h100]\nworker_id: from-yaml\n"
                      << "log_level: error\ncache: " << ::testing::TempDir() << "dc-farm-test-cache\n";
  const std::string worker = std::string(DC_BIN_DIR) + "/dc-worker";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl(worker.c_str(), worker.c_str(), "--config", path.c_str(), nullptr);
    ::_exit(127);
  }
  EXPECT_TRUE(testing::eventually(
      [&] {
        const FarmStatus st = broker.status();
        return st.workers_per_gpu_type.count("a100") == 1 && st.workers_per_gpu_type.count("h100") == 1;
      },
      10s));
  broker.submit(scale_job("j", "a100"));
  const auto ms = collect_n(broker, 1, 10s);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].worker, "from-yaml/0");  // a100 is its device 0
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

  std::ofstream(path, std::ios::trunc) << "connect: " << broker.endpoint() << "\nemulate: h100\ncolour: blue\n";
  const std::string cmd = worker + " --config " + path + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int rc = ::pclose(p);
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  EXPECT_NE(out.find("unknown key 'colour'"), std::string::npos) << out;
  std::remove(path.c_str());
}

TEST(LocalFarm, WorkersThatCannotStartAreReported) {
  LocalFarmOptions o = local_options({"h100"}, 1);
  o.gpu_types = {"h999"};  // not in the GPU table: dc-worker exits with status 2
  LocalFarm farm(o);
  try {
    farm.wait_for_workers(testing::scaled(20s));
    FAIL() << "expected every worker to fail";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("exit status 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dc
