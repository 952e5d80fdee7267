// The farm as a service (coordinator/service/): FarmService on loopback with in-process
// workers whose jobs take a few milliseconds, and RemoteFarm clients as `tune --farm` uses
// them. Fair share, identical jobs measured once, answers from the DB, cancellation of a
// departed client's queue, and the clients' own CURVE allow-list.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <unistd.h>

#include <zmq.hpp>

#include "client_codec.h"
#include "farm_client.h"
#include "farm_codec.h"
#include "farm_dispatch.h"
#include "farm_security.h"
#include "farm_service.h"
#include "farm_service_impl.h"  // kMaxWriterBacklog
#include "farm_service_testing.h"
#include "job_wire.h"
#include "remote_farm.h"
#include "status_request.h"
#include "variant.h"

namespace dc {
namespace {

using namespace std::chrono_literals;

using namespace service_testing;

// Collects until `n` measurements arrived (or 30 s passed).
std::vector<Measurement> collect_n(RemoteFarm& f, size_t n) {
  std::vector<Measurement> out;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (out.size() < n && std::chrono::steady_clock::now() < deadline)
    for (Measurement& m : f.collect(200ms)) out.push_back(std::move(m));
  return out;
}

// Waits until the service holds `n` submitted jobs over its tunes.
void wait_submitted(const Service& s, int64_t n) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    int64_t got = 0;
    const farm::StatusReply st = s.status();
    for (const auto& t : st.tunes()) got += t.submitted();
    if (got >= n) return;
    std::this_thread::sleep_for(20ms);
  }
  FAIL() << "the service did not receive " << n << " jobs";
}

farm::Envelope outcome_of(const std::string& job_id, const std::string& error = "") {
  farm::Envelope e = farm::make_envelope();
  e.mutable_outcome()->set_job_id(job_id);
  e.mutable_outcome()->mutable_record()->set_error(error);
  return e;
}

std::vector<std::string> job_ids(const farm::Envelope& batch) {
  std::vector<std::string> ids;
  for (const farm::Outcome& o : batch.outcomes().outcomes()) ids.push_back(o.job_id());
  return ids;
}

// Client protocol 3: each client's outcomes in one OutcomeBatch, in order, at the place of its
// first outcome (after a Welcome sent before them); other messages as they were.
TEST(FarmClientProtocol, OutcomesGoInOneBatchPerClientAtTheirFirstPlace) {
  std::vector<std::pair<std::string, farm::Envelope>> in;
  farm::Envelope welcome = farm::make_envelope();
  welcome.mutable_client_welcome()->set_tune_id(7);
  farm::Envelope status = farm::make_envelope();
  status.mutable_client_status();
  in.emplace_back("a", welcome);
  in.emplace_back("b", outcome_of("b1"));
  in.emplace_back("a", outcome_of("a1"));
  in.emplace_back("b", status);
  in.emplace_back("a", outcome_of("a2"));
  in.emplace_back("b", outcome_of("b2"));
  in.emplace_back("a", outcome_of("a3"));
  const auto out = farm::batch_outcomes(in);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].first, "a");
  EXPECT_EQ(out[0].second.body_case(), farm::Envelope::kClientWelcome);
  EXPECT_EQ(out[1].first, "b");
  ASSERT_EQ(out[1].second.body_case(), farm::Envelope::kOutcomes);
  EXPECT_EQ(job_ids(out[1].second), (std::vector<std::string>{"b1", "b2"}));
  EXPECT_EQ(out[2].first, "a");
  ASSERT_EQ(out[2].second.body_case(), farm::Envelope::kOutcomes);
  EXPECT_EQ(job_ids(out[2].second), (std::vector<std::string>{"a1", "a2", "a3"}));
  EXPECT_EQ(out[3].first, "b");
  EXPECT_EQ(out[3].second.body_case(), farm::Envelope::kClientStatus);
  EXPECT_EQ(out[2].second.protocol_version(), farm::kProtocolVersion);
}

// A batch is closed past kMaxClientBatchBytes, well below the frame limit; the next one follows.
TEST(FarmClientProtocol, AnOutcomeBatchIsSplitPastItsBound) {
  std::vector<std::pair<std::string, farm::Envelope>> in;
  const std::string error(200000, 'e');  // a long compile log
  for (int i = 0; i < 12; ++i) in.emplace_back("a", outcome_of("a" + std::to_string(i), error));
  const auto out = farm::batch_outcomes(in);
  ASSERT_EQ(out.size(), 3u);  // 5 + 5 + 2 outcomes of about 200 KB
  std::vector<std::string> ids;
  for (const auto& [identity, e] : out) {
    EXPECT_LE(e.ByteSizeLong(), farm::kMaxClientBatchBytes + 100);
    for (const std::string& id : job_ids(e)) ids.push_back(id);
  }
  ASSERT_EQ(ids.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(ids[i], "a" + std::to_string(i));
}

// RemoteFarm sends a run of jobs as the concatenation of one-job SubmitBatch frames: protobuf
// parses it as one Envelope whose batch holds every job, in order.
TEST(FarmClientProtocol, OneJobSubmitFramesJoinedAreOneBatchInOrder) {
  std::string joined;
  for (int i = 0; i < 3; ++i) {
    farm::Envelope e = farm::make_envelope();
    farm::TuneJob* tj = e.mutable_submits()->add_jobs();
    tj->set_job(FarmDispatcher::prepare(service_job("wj", i)).wire);
    tj->mutable_workload()->set_signature("wj");
    joined += farm::serialize(e);
  }
  std::string why;
  const auto e = farm::parse_envelope(joined.data(), joined.size(), farm::kDefaultMaxMessageBytes, &why);
  ASSERT_TRUE(e) << why;
  EXPECT_EQ(e->protocol_version(), farm::kProtocolVersion);
  ASSERT_EQ(e->body_case(), farm::Envelope::kSubmits);
  ASSERT_EQ(e->submits().jobs_size(), 3);
  for (int i = 0; i < 3; ++i) {
    std::string_view source;
    const MeasureJob head = farm::read_job_head(e->submits().jobs(i).job(), &source);
    EXPECT_EQ(head.job_id, service_job("wj", i).job_id);
  }
}

TEST(FarmService, ThreeTunesShareByPriorityAndMeasureIdenticalJobsOnce) {
  auto db = make_memory_db();
  Service service(*db);
  constexpr int kJobs = 120;
  // Two tunes of model X (priorities 1 and 2) and one of model Y (priority 3).
  RemoteFarm a(client(service.endpoint(), "x", 1));
  RemoteFarm b(client(service.endpoint(), "x", 2));
  RemoteFarm c(client(service.endpoint(), "y", 3));
  for (int i = 0; i < kJobs; ++i) {
    a.submit(service_job("wx", i));
    b.submit(service_job("wx", i));
    c.submit(service_job("wy", i));
  }
  wait_submitted(service, 3 * kJobs);
  // Every tune waits from the start: the shares are the scheduler's alone.
  Workers workers(service.endpoint(), 4, 2ms);
  const auto ma = collect_n(a, kJobs), mb = collect_n(b, kJobs), mc = collect_n(c, kJobs);
  ASSERT_EQ(ma.size(), size_t{kJobs});
  ASSERT_EQ(mb.size(), size_t{kJobs});
  ASSERT_EQ(mc.size(), size_t{kJobs});
  for (const auto& ms : {ma, mb, mc}) {
    std::set<std::string> keys;
    for (const Measurement& m : ms) {
      EXPECT_EQ(m.status, JobStatus::ok);
      EXPECT_TRUE(keys.insert(m.job_id).second) << "two results for " << m.job_id;
    }
  }
  // Measured once: 2 x kJobs sources, each run once.
  const auto runs = workers.runs();
  EXPECT_EQ(runs.size(), size_t{2 * kJobs});
  for (const auto& [source, n] : runs) EXPECT_EQ(n, 1) << source;
  // Every DB row once: one measurement per (workload, variant).
  MeasurementQuery q;
  const auto rows = db->query(q);
  EXPECT_EQ(rows.size(), size_t{2 * kJobs});
  std::set<std::pair<std::string, std::string>> distinct;
  for (const Measurement& m : rows) distinct.insert({m.workload, m.variant_key});
  EXPECT_EQ(distinct.size(), rows.size());
  // Shares of measured jobs follow the priorities 1:2:3 (X's jobs are shared by a and b,
  // so together they drain X as fast as c drains Y).
  const RemoteFarmCounts ca = a.counts(), cb = b.counts(), cc = c.counts();
  EXPECT_EQ(ca.measured + ca.joined, kJobs);
  EXPECT_EQ(cb.measured + cb.joined, kJobs);
  EXPECT_EQ(cc.measured, kJobs);
  EXPECT_EQ(ca.measured + cb.measured, kJobs);
  const double total = static_cast<double>(ca.measured + cb.measured + cc.measured);
  EXPECT_NEAR(ca.measured / total, 1.0 / 6, 0.15 / 6) << ca.measured << " " << cb.measured << " " << cc.measured;
  EXPECT_NEAR(cb.measured / total, 2.0 / 6, 0.15 * 2 / 6);
  EXPECT_NEAR(cc.measured / total, 3.0 / 6, 0.15 * 3 / 6);

  // A fourth tune of X: everything from the DB at once, nothing measured.
  RemoteFarm d(client(service.endpoint(), "x", 1));
  for (int i = 0; i < kJobs; ++i) d.submit(service_job("wx", i));
  const auto md = collect_n(d, kJobs);
  EXPECT_EQ(md.size(), size_t{kJobs});
  EXPECT_EQ(d.counts().from_db, kJobs);
  EXPECT_EQ(workers.total(), 2 * kJobs);
  EXPECT_EQ(db->query(q).size(), size_t{2 * kJobs});
}

// Identical kernels under other names (another workload, another variant key) are measured
// once, and each tune's outcome carries its own names.
// Version 4: the service forwards a job's bytes without checking its kernels; the worker
// checks them. A tune's malformed kernel comes back as a recorded failure (it was dropped at
// the service's door before, and the tune never had an outcome for it), and the worker serves on.
TEST(FarmService, AMalformedKernelIsARecordedFailureAndTheWorkerServesOn) {
  auto db = make_memory_db();
  Service service(*db);
  RemoteFarm a(client(service.endpoint(), "m", 1));
  FarmJob bad = service_job("wm", 0);
  bad.variant_kernel.buffers[0].dtype = DType::undefined;  // code 0 on the wire: no such dtype
  a.submit(bad);
  for (int i = 1; i <= 3; ++i) a.submit(service_job("wm", i));
  Workers workers(service.endpoint(), 1, 1ms);
  const auto ms = collect_n(a, 4);
  ASSERT_EQ(ms.size(), 4u);
  for (const Measurement& m : ms) {
    if (m.job_id == bad.job_id) {
      EXPECT_EQ(m.status, JobStatus::unsupported);
      EXPECT_NE(m.error.find("malformed job"), std::string::npos) << m.error;
      EXPECT_NE(m.error.find("dtype"), std::string::npos) << m.error;
    } else {
      EXPECT_EQ(m.status, JobStatus::ok) << m.job_id;
    }
  }
  EXPECT_EQ(workers.total(), 3) << "the malformed job ran nothing";
  MeasurementQuery q;
  q.workload = "wm";
  const auto rows = db->query(q);
  ASSERT_EQ(rows.size(), 4u);
  int failed = 0;
  for (const Measurement& r : rows)
    if (r.variant_key == bad.variant_kernel.variant_key) {
      EXPECT_EQ(r.status, JobStatus::unsupported);
      ++failed;
    }
  EXPECT_EQ(failed, 1) << "the failure is recorded once";
}

TEST(FarmService, AJoinedOutcomeCarriesTheJoiningTunesOwnNames) {
  auto db = make_memory_db();
  Service service(*db);
  constexpr int kJobs = 20;
  RemoteFarm a(client(service.endpoint(), "x", 1));
  RemoteFarm b(client(service.endpoint(), "y", 1));
  std::map<std::string, std::string> key_of_b;  // job id -> its variant key
  for (int i = 0; i < kJobs; ++i) {
    const FarmJob ja = service_job("wa", i);
    FarmJob jb = service_job("wb", 1000 + i);
    jb.variant_kernel.source = ja.variant_kernel.source;
    jb.reference = ja.reference;
    key_of_b[jb.job_id] = jb.variant_kernel.variant_key;
    a.submit(ja);
    b.submit(jb);
  }
  wait_submitted(service, 2 * kJobs);
  Workers workers(service.endpoint(), 2, 1ms);
  const auto ma = collect_n(a, kJobs), mb = collect_n(b, kJobs);
  ASSERT_EQ(ma.size(), size_t{kJobs});
  ASSERT_EQ(mb.size(), size_t{kJobs});
  EXPECT_EQ(workers.total(), kJobs) << "one run per source";
  for (const Measurement& m : ma) EXPECT_EQ(m.workload, "wa");
  for (const Measurement& m : mb) {
    EXPECT_EQ(m.workload, "wb");
    ASSERT_EQ(key_of_b.count(m.job_id), 1u) << m.job_id;
    EXPECT_EQ(m.variant_key, key_of_b[m.job_id]);
  }
}

TEST(FarmService, ADepartedClientsQueuedJobsAreCancelledAndARerunMeasuresOnlyTheRest) {
  auto db = make_memory_db();
  FarmServiceOptions so;
  so.window_per_device = 1;
  Service service(*db, so);
  Workers workers(service.endpoint(), 1, 30ms);
  constexpr int kJobs = 60;
  size_t before_bye = 0;
  {
    RemoteFarm a(client(service.endpoint(), "x", 1));
    for (int i = 0; i < kJobs; ++i) a.submit(service_job("wx", i));
    before_bye = collect_n(a, 5).size();
    a.shutdown();  // ClientBye: what is queued for it is cancelled
  }
  ASSERT_GE(before_bye, 5u);
  // What was on the worker finishes and is recorded; nothing else is measured.
  std::this_thread::sleep_for(500ms);
  const int measured = workers.total();
  EXPECT_LT(measured, kJobs / 2);
  const auto st = service.status();
  EXPECT_EQ(st.tunes_size(), 0);
  EXPECT_EQ(st.jobs_cancelled(), kJobs - measured);
  MeasurementQuery q;
  EXPECT_EQ(db->query(q).size(), size_t(measured));
  // The rerun gets the measured ones from the DB and measures only the rest.
  RemoteFarm b(client(service.endpoint(), "x", 1));
  for (int i = 0; i < kJobs; ++i) b.submit(service_job("wx", i));
  EXPECT_EQ(collect_n(b, kJobs).size(), size_t{kJobs});
  EXPECT_EQ(b.counts().from_db, measured);
  EXPECT_EQ(b.counts().measured, kJobs - measured);
  EXPECT_EQ(workers.total(), kJobs);
  for (const auto& [source, n] : workers.runs()) EXPECT_EQ(n, 1) << source;
  EXPECT_EQ(db->query(q).size(), size_t{kJobs});
}

TEST(FarmService, ASilentClientIsEndedAndItsQueueCancelled) {
  auto db = make_memory_db();
  FarmServiceOptions so;
  so.client_heartbeat = 100ms;
  so.client_grace = 0ms;  // ended as soon as it is silent (the grace: the tests below)
  Service service(*db, so);
  // No workers: everything stays queued. The client's thread is frozen by never being
  // allowed to heartbeat: a RemoteFarm whose loop we cannot stop, so use a raw one.
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect(service.endpoint());
  farm::Envelope hello = farm::make_envelope();
  hello.mutable_client_hello()->set_client_protocol_version(farm::kClientProtocolVersion);
  hello.mutable_client_hello()->add_gpu_types("h100");
  hello.mutable_client_hello()->set_priority(1);
  s.send(zmq::buffer(farm::serialize(hello)), zmq::send_flags::none);
  for (int i = 0; i < 5; ++i) {
    farm::Envelope e = farm::make_envelope();
    FarmJob j = service_job("wz", i);
    farm::TuneJob* tj = e.mutable_submit()->mutable_job();
    *tj->mutable_job() = FarmDispatcher::prepare(j).wire;
    tj->mutable_workload()->set_signature("wz");
    tj->mutable_variant()->set_template_name("bench");
    tj->mutable_variant()->set_precision("fp32");
    (*tj->mutable_variant()->mutable_params())["i"] = i;
    tj->set_reuse(true);
    s.send(zmq::buffer(farm::serialize(e)), zmq::send_flags::none);
  }
  wait_submitted(service, 5);
  EXPECT_EQ(service.status().queues(0).queued(), 5);
  // Then silence: 3 heartbeats of 100 ms.
  std::this_thread::sleep_for(800ms);
  const auto st = service.status();
  EXPECT_EQ(st.tunes_size(), 0);
  EXPECT_EQ(st.jobs_cancelled(), 5);
}

// A raw client (a DEALER socket of its own): Hello, Submits, then whatever it is told.
class RawClient {
 public:
  explicit RawClient(const std::string& endpoint) : socket_(ctx_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
  }
  // Hello (resuming `tune` of `service_id` when given); the Welcome.
  farm::ClientWelcome hello(uint64_t tune = 0, const std::string& service_id = "") {
    farm::Envelope e = farm::make_envelope();
    farm::ClientHello* h = e.mutable_client_hello();
    h->set_client_protocol_version(farm::kClientProtocolVersion);
    h->add_gpu_types("h100");
    h->set_priority(1);
    h->set_model("raw");
    h->set_resume_tune_id(tune);
    h->set_resume_service_id(service_id);
    socket_.send(zmq::buffer(farm::serialize(e)), zmq::send_flags::none);
    for (const farm::Envelope& r : receive(2s, 1, farm::Envelope::kClientWelcome)) return r.client_welcome();
    ADD_FAILURE() << "no Welcome";
    return {};
  }
  static farm::TuneJob tune_job(int i, const std::string& workload) {
    farm::TuneJob tj;
    *tj.mutable_job() = FarmDispatcher::prepare(service_job(workload, i)).wire;
    tj.mutable_workload()->set_signature(workload);
    tj.mutable_variant()->set_template_name("bench");
    tj.mutable_variant()->set_precision("fp32");
    (*tj.mutable_variant()->mutable_params())["i"] = i;
    tj.set_emulated(true);
    tj.set_nvrtc_major("13");
    tj.set_reuse(true);
    return tj;
  }
  // A lone Submit (still understood in client protocol 3).
  void submit(int i, const std::string& workload = "wz") {
    farm::Envelope e = farm::make_envelope();
    *e.mutable_submit()->mutable_job() = tune_job(i, workload);
    socket_.send(zmq::buffer(farm::serialize(e)), zmq::send_flags::none);
  }
  // Jobs first..first+n-1 in one SubmitBatch.
  void submit_batch(int first, int n, const std::string& workload = "wz") {
    farm::Envelope e = farm::make_envelope();
    for (int i = first; i < first + n; ++i) *e.mutable_submits()->add_jobs() = tune_job(i, workload);
    socket_.send(zmq::buffer(farm::serialize(e)), zmq::send_flags::none);
  }
  // The outcomes of OutcomeBatches until `n` came or `timeout` passed; `batches` counts the messages.
  std::vector<farm::Outcome> outcomes(std::chrono::milliseconds timeout, size_t n, size_t* batches = nullptr) {
    std::vector<farm::Outcome> out;
    for (const farm::Envelope& e : receive(timeout, n, farm::Envelope::kOutcomes, [](const farm::Envelope& b) {
           return static_cast<size_t>(b.outcomes().outcomes_size());
         })) {
      for (const farm::Outcome& o : e.outcomes().outcomes()) out.push_back(o);
      if (batches) ++*batches;
    }
    return out;
  }
  void heartbeat() {
    farm::Envelope e = farm::make_envelope();
    e.mutable_client_heartbeat();
    socket_.send(zmq::buffer(farm::serialize(e)), zmq::send_flags::none);
  }
  // Messages of kind `body` until `n` came or `timeout` passed (heartbeating meanwhile); `count`
  // says how many a message brings (default: one each).
  std::vector<farm::Envelope> receive(std::chrono::milliseconds timeout, size_t n, farm::Envelope::BodyCase body,
                                      std::function<size_t(const farm::Envelope&)> count = {}) {
    std::vector<farm::Envelope> out;
    size_t got = 0;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (got < n && std::chrono::steady_clock::now() < deadline) {
      zmq::message_t m;
      if (!socket_.recv(m, zmq::recv_flags::dontwait)) {
        std::this_thread::sleep_for(10ms);
        heartbeat();
        continue;
      }
      std::string why;
      auto e = farm::parse_envelope(m.data(), m.size(), farm::kDefaultMaxMessageBytes, &why);
      if (e && e->body_case() == body) {
        got += count ? count(*e) : 1;
        out.push_back(std::move(*e));
      }
    }
    return out;
  }

 private:
  zmq::context_t ctx_;
  zmq::socket_t socket_;
};

farm::TuneView only_tune(const farm::StatusReply& st) {
  EXPECT_EQ(st.tunes_size(), 1);
  return st.tunes_size() > 0 ? st.tunes(0) : farm::TuneView();
}

// Silent past its liveness, back (from another socket) within the grace: the same tune,
// its queued jobs kept and answered; a resubmit of a job already answered is answered again.
TEST(FarmService, AClientBackWithinTheGraceResumesItsTune) {
  auto db = make_memory_db();
  FarmServiceOptions so;
  so.client_heartbeat = 100ms;
  so.client_grace = 5s;
  Service service(*db, so);
  farm::ClientWelcome first;
  {
    RawClient gone(service.endpoint());
    first = gone.hello();
    for (int i = 0; i < 5; ++i) gone.submit(i);
    wait_submitted(service, 5);
  }  // its socket closed: silent from now on
  std::this_thread::sleep_for(600ms);  // past 3 heartbeats of 100 ms
  farm::TuneView t = only_tune(service.status());
  EXPECT_FALSE(t.connected());
  EXPECT_EQ(t.queued(), 5);
  EXPECT_EQ(service.status().jobs_cancelled(), 0);
  // Kept, but not served while its client is away.
  Workers workers(service.endpoint(), 1, 2ms);
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(workers.total(), 0);

  RawClient back(service.endpoint());
  const farm::ClientWelcome again = back.hello(first.tune_id(), first.service_id());
  EXPECT_TRUE(again.resumed());
  EXPECT_EQ(again.tune_id(), first.tune_id());
  t = only_tune(service.status());
  EXPECT_TRUE(t.connected());  // and served again: the worker that waited gets its jobs
  const auto outcomes = back.outcomes(10s, 5);
  ASSERT_EQ(outcomes.size(), 5u);
  // Resubmitted after an outcome (as a client that lost it does): sent again, not measured.
  back.submit(0);
  EXPECT_EQ(back.outcomes(3s, 1).size(), 1u);
  EXPECT_EQ(workers.total(), 5);
  EXPECT_EQ(service.status().jobs_cancelled(), 0);
  // Another service id (a restarted service's) or an unknown tune: a new tune, not this one.
  RawClient other(service.endpoint());
  EXPECT_FALSE(other.hello(first.tune_id(), "another/service").resumed());
}

// Client protocol 3: a SubmitBatch is served job by job (a turn may end inside it), and
// outcomes come back in OutcomeBatches, each job's exactly once.
TEST(FarmService, SubmitsAndOutcomesTravelInBatchesAndEachJobIsAnsweredOnce) {
  auto db = make_memory_db();
  Service service(*db);
  RawClient c(service.endpoint());
  c.hello();
  constexpr int kJobs = 600;
  c.submit_batch(0, 400);
  c.submit_batch(400, kJobs - 400);
  wait_submitted(service, kJobs);
  EXPECT_EQ(service.status().queues(0).queued(), kJobs);
  Workers workers(service.endpoint(), 4, 0ms);
  size_t batches = 0;
  const auto got = c.outcomes(30s, kJobs, &batches);
  ASSERT_EQ(got.size(), size_t{kJobs});
  std::set<std::string> ids;
  for (const farm::Outcome& o : got) {
    EXPECT_TRUE(ids.insert(o.job_id()).second) << "two outcomes for " << o.job_id();
    EXPECT_EQ(o.record().status(), "ok");
  }
  EXPECT_EQ(ids.size(), size_t{kJobs});
  EXPECT_EQ(workers.total(), kJobs);
  // Outcomes of one commit share a message: far fewer messages than jobs.
  EXPECT_LT(batches, size_t{kJobs} / 2) << batches << " OutcomeBatches for " << kJobs << " outcomes";
  // Answered again from the DB, in one SubmitBatch: the same jobs, no run.
  c.submit_batch(0, 50);
  EXPECT_EQ(c.outcomes(10s, 50).size(), 50u);
  EXPECT_EQ(workers.total(), kJobs);
}

TEST(FarmService, AClientNotBackWithinTheGraceIsEndedAndItsQueueCancelled) {
  auto db = make_memory_db();
  FarmServiceOptions so;
  so.client_heartbeat = 100ms;
  so.client_grace = 300ms;
  Service service(*db, so);
  {
    RawClient gone(service.endpoint());
    gone.hello();
    for (int i = 0; i < 4; ++i) gone.submit(i);
    wait_submitted(service, 4);
  }
  std::this_thread::sleep_for(1200ms);  // 300 ms of silence, then 300 ms of grace, and margin
  const auto st = service.status();
  EXPECT_EQ(st.tunes_size(), 0);
  EXPECT_EQ(st.jobs_cancelled(), 4);
}

// The service stopped and another started on the same endpoint and DB mid-tune (the
// restart of `serve`): the RemoteFarm reconnects, submits again what it has no outcome for,
// and gets one outcome per job; every DB row once.
TEST(FarmService, AClientResubmitsToARestartedServiceAndNothingIsRecordedTwice) {
  auto db = make_memory_db();
  FarmServiceOptions so;
  so.client_heartbeat = 100ms;
  so.window_per_device = 1;
  constexpr int kJobs = 40;
  auto first = std::make_unique<Service>(*db, so);
  const std::string endpoint = first->endpoint();
  so.broker.endpoint = endpoint;  // the restarted one binds the same port
  std::unique_ptr<Service> second;
  RemoteFarmOptions co = client(endpoint, "x", 1);
  co.reconnect_timeout = 20s;
  RemoteFarm tune(co);
  Workers workers(endpoint, 2, 10ms);  // they rejoin the second service by themselves
  for (int i = 0; i < kJobs; ++i) tune.submit(service_job("wr", i));
  std::vector<Measurement> got = collect_n(tune, 10);
  first.reset();  // the service goes away mid-tune
  ASSERT_GE(got.size(), 10u);
  ASSERT_LT(got.size(), size_t{kJobs});
  second = std::make_unique<Service>(*db, so);
  for (Measurement& m : collect_n(tune, kJobs - got.size())) got.push_back(std::move(m));
  std::set<std::string> ids;
  for (const Measurement& m : got) EXPECT_TRUE(ids.insert(m.job_id).second) << "two outcomes for " << m.job_id;
  EXPECT_EQ(ids.size(), size_t{kJobs});
  const RemoteFarmCounts c = tune.counts();
  EXPECT_GE(c.reconnects, 1);
  EXPECT_GT(c.resubmitted, 0);  // what had no outcome when the service went
  EXPECT_LE(c.resubmitted, int64_t{kJobs} - 10);
  EXPECT_EQ(c.measured + c.joined + c.from_db, kJobs);
  MeasurementQuery q;
  const auto rows = db->query(q);
  std::set<std::string> keys;
  for (const Measurement& m : rows) EXPECT_TRUE(keys.insert(m.variant_key).second) << "recorded twice: " << m.variant_key;
  EXPECT_EQ(rows.size(), size_t{kJobs});
}

// The DB batch over turns (farm_service.cpp, serve_turn): an outcome never reaches a tune
// before the batch holding its measurement is committed, whatever the batch spans. Checked
// from the tune's side through a second connection to the service's DB file, which sees
// committed rows only (WAL): every outcome's row must be there when the outcome arrives.
TEST(FarmService, NoOutcomeReachesATuneBeforeItsRowIsCommitted) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("dc_farm_service_batch_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/service.db";
  {
    auto db = open_tuning_db(path);
    auto committed = open_tuning_db(path, /*read_only=*/true);
    Service service(*db);
    RemoteFarm tune(client(service.endpoint(), "x", 1));
    Workers workers(service.endpoint(), 4, 0ms);  // results as fast as they come: batches of many rows
    constexpr int kJobs = 400;
    for (int i = 0; i < kJobs; ++i) tune.submit(service_job("wb", i));
    int seen = 0, early = 0;
    std::string first_early;
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (seen < kJobs && std::chrono::steady_clock::now() < deadline) {
      for (const Measurement& m : tune.collect(200ms)) {
        ++seen;
        MeasurementQuery q;
        q.workload = m.workload;
        q.variant_key = m.variant_key;
        if (committed->query(q).size() != 1) {
          ++early;
          if (first_early.empty()) first_early = m.job_id;
        }
      }
    }
    EXPECT_EQ(seen, kJobs);
    EXPECT_EQ(early, 0) << "outcomes that reached the tune before their row was committed, the first "
                        << first_early;
    EXPECT_EQ(committed->query({}).size(), size_t{kJobs});
  }
  std::filesystem::remove_all(dir);
}

// The burst guard: while the DB writer owes kMaxWriterBacklog works, the loop takes no more
// client messages, so a burst of Submits cannot queue seconds of DB work ahead of every
// reply. The test holds the DB (the writer waits for the batch) while a tune submits more
// jobs than the backlog: the service takes exactly the backlog's worth, and the rest once
// the DB is free.
TEST(FarmService, ABurstOfSubmitsWaitsWhileTheDbWriterIsABacklogBehind) {
  using farm_service_detail::kMaxWriterBacklog;
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("dc_farm_service_burst_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    auto db = open_tuning_db(dir + "/service.db");
    std::atomic<int64_t> submitted{0};
    FarmServiceOptions o;
    o.view_interval = 10ms;  // views come from the loop's own thread, not as client messages
    o.on_view = [&submitted](const ServiceView& v) {
      int64_t n = 0;
      for (const ServiceView::Tune& t : v.tunes) n += t.submitted;
      submitted = n;
    };
    Service service(*db, o);
    RemoteFarm tune(client(service.endpoint(), "x", 1));  // its Welcome waits for the commits before it
    constexpr int kJobs = static_cast<int>(kMaxWriterBacklog) + 1500;
    const auto wait_for = [&submitted](int64_t n, std::chrono::seconds bound) {
      const auto deadline = std::chrono::steady_clock::now() + bound;
      while (submitted < n && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    };
    {
      auto hold = db->begin_batch();  // the writer waits from here
      for (int i = 0; i < kJobs; ++i) tune.submit(service_job("wg", i));
      wait_for(static_cast<int64_t>(kMaxWriterBacklog), 20s);
      std::this_thread::sleep_for(300ms);  // time for the loop to take more, were it to
      EXPECT_EQ(submitted.load(), static_cast<int64_t>(kMaxWriterBacklog))
          << "jobs the service took while its writer owed a backlog";
      hold->commit();
    }
    wait_for(kJobs, 30s);
    EXPECT_EQ(submitted.load(), kJobs) << "jobs the service took once its writer caught up";
  }
  std::filesystem::remove_all(dir);
}

// A job is placed in a group only once the DB writer has looked it up, so the group it would
// join may finish in between. The test holds the DB (a batch of its own, which the writer
// waits for) while tune b submits the job that tune a's worker is running, until the result
// is in: b's look-up then finds no row, and b joins the result kept in memory until it is
// committed. Measured once, both answered.
TEST(FarmService, AJobLookedUpWhileItsGroupFinishesJoinsTheResultBeingWritten) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("dc_farm_service_written_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    auto db = open_tuning_db(dir + "/service.db");
    Service service(*db);
    Workers workers(service.endpoint(), 1, 500ms);
    RemoteFarm a(client(service.endpoint(), "x", 1));
    RemoteFarm b(client(service.endpoint(), "x", 1));
    a.submit(service_job("wj", 0));
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (workers.total() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    ASSERT_EQ(workers.total(), 1) << "a's job never reached the worker";
    {
      auto hold = db->begin_batch();  // the writer waits from here
      b.submit(service_job("wj", 0));
      std::this_thread::sleep_for(900ms);  // b's Submit in, the 500 ms job done, its result in the service
      hold->commit();
    }
    const auto ma = collect_n(a, 1), mb = collect_n(b, 1);
    ASSERT_EQ(ma.size(), 1u);
    ASSERT_EQ(mb.size(), 1u);
    EXPECT_EQ(mb[0].status, JobStatus::ok);
    EXPECT_EQ(mb[0].worker, ma[0].worker);
    EXPECT_EQ(workers.total(), 1) << "the job was measured again for the tune that looked it up meanwhile";
    EXPECT_EQ(db->query({}).size(), 1u);
  }
  std::filesystem::remove_all(dir);
}

// tune --farm's quarantine reaches the service: a job's avoid_workers go to the service's
// broker (the job goes to another worker while one serves the type), and a result the
// client's tune marks implausible is marked in the service's DB too.
TEST(FarmService, AvoidedWorkersReachTheBrokerAndAClientsMarkReachesTheServicesDb) {
  auto db = make_memory_db();
  Service service(*db);
  Workers workers(service.endpoint(), 2, 5ms);
  RemoteFarm a(client(service.endpoint(), "q", 1));
  // Both workers serve the type: a first batch reaches both.
  constexpr int kJobs = 24;
  std::set<std::string> seen;
  for (int attempt = 0; attempt < 20 && seen.size() < 2; ++attempt) {
    for (int i = 0; i < kJobs; ++i) a.submit(service_job("wa" + std::to_string(attempt), i));
    for (const Measurement& m : collect_n(a, kJobs)) seen.insert(m.worker);
  }
  ASSERT_EQ(seen, (std::set<std::string>{"svc-0/0", "svc-1/0"}));
  // Every job of the next batch avoids svc-0: svc-1 takes them all.
  for (int i = 0; i < kJobs; ++i) {
    FarmJob j = service_job("wb", i);
    j.avoid_workers = {"svc-0/0"};
    a.submit(std::move(j));
  }
  const std::vector<Measurement> got = collect_n(a, kJobs);
  ASSERT_EQ(got.size(), size_t{kJobs});
  for (const Measurement& m : got) EXPECT_EQ(m.worker, "svc-1/0") << m.variant_key;
  // The client marks one of them implausible; the service's row follows.
  const Measurement& marked = got.front();
  ASSERT_EQ(marked.status, JobStatus::ok);
  a.mark_implausible(marked, "worker svc-1/0 quarantined by tune's cross-check: a test");
  MeasurementQuery q;
  q.workload = marked.workload;
  q.variant_key = marked.variant_key;
  std::vector<Measurement> rows;
  for (int i = 0; i < 250; ++i) {
    rows = db->query(q);
    if (rows.size() == 1 && rows[0].status == JobStatus::implausible) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].status, JobStatus::implausible);
  EXPECT_EQ(rows[0].error, "worker svc-1/0 quarantined by tune's cross-check: a test");
  // The others of the batch stay ok.
  MeasurementQuery ok;
  ok.status = JobStatus::ok;
  ok.worker = "svc-1/0";
  size_t still_ok = 0;
  for (const Measurement& m : db->query(ok)) still_ok += m.workload == "wb";
  EXPECT_EQ(still_ok, size_t{kJobs - 1});
}

TEST(FarmService, AnUnknownClientKeyIsRefusedAndNoJobOfItReachesAWorker) {
  const farm::CurveKeyPair server = farm::generate_curve_keypair();
  const farm::CurveKeyPair worker = farm::generate_curve_keypair();
  const farm::CurveKeyPair known = farm::generate_curve_keypair();
  const farm::CurveKeyPair stranger = farm::generate_curve_keypair();
  auto db = make_memory_db();
  FarmServiceOptions so;
  so.broker.curve_secret_key = server.secret_key;
  so.broker.allowed_worker_keys = {worker.public_key};
  so.broker.allowed_client_keys = {known.public_key};
  Service service(*db, so);
  Workers workers(service.endpoint(), 1, 1ms, worker.public_key, server.public_key, worker.secret_key);
  auto with_key = [&](const farm::CurveKeyPair& k) {
    RemoteFarmOptions o = client(service.endpoint(), "x", 1);
    o.server_public_key = server.public_key;
    o.client_public_key = k.public_key;
    o.client_secret_key = k.secret_key;
    o.connect_timeout = 2s;
    return o;
  };
  // A key in no list: the handshake fails, so the service never answers.
  EXPECT_THROW({ RemoteFarm f(with_key(stranger)); }, UserError);
  // A worker's key is not a client's: refused by name.
  try {
    RemoteFarm f(with_key(worker));
    ADD_FAILURE() << "a worker's key was accepted as a client";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("clients' allow-list"), std::string::npos) << e.what();
  }
  EXPECT_EQ(workers.total(), 0);
  EXPECT_EQ(db->query(MeasurementQuery{}).size(), 0u);
  // The known key tunes.
  RemoteFarm ok(with_key(known));
  ok.submit(service_job("wk", 1));
  const auto got = collect_n(ok, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, JobStatus::ok);
  EXPECT_EQ(workers.total(), 1);
}

}  // namespace
}  // namespace dc
