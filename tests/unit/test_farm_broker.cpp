// The coordinator's farm broker (coordinator/farm/farm_broker.h) against workers written by hand
// (farm_testing.h's FakeWorker) over loopback TCP: routing by GPU type, credits, leases and
// their requeue, deadlines, exactly-once results, bad frames, versions and CURVE.
#include <map>
#include <set>
#include <thread>

#include "farm_broker.h"
#include "farm_security.h"
#include "farm_testing.h"
#include "read_budget.h"

namespace dc {
namespace {

using namespace std::chrono_literals;
using testing::collect_n;
using testing::FakeWorker;
using testing::scale_job;

// Fake workers answer heartbeats only while they wait for a message: tests that are not
// about liveness use a heartbeat long enough for them to stay alive between waits.
FarmBrokerOptions fast_options(std::chrono::milliseconds heartbeat = 1000ms) {
  FarmBrokerOptions o;
  o.heartbeat = heartbeat;
  o.deadline_grace = 200ms;
  return o;
}

// The frames the broker reads in one wake (read_router's loop over a ReadBudget) when
// `waiting` frames of `bytes` each are queued on its socket.
int frames_read_in_one_wake(size_t bytes, int waiting) {
  int n = 0;
  for (ReadBudget budget; n < waiting && budget.more(); ++n) budget.took(bytes);
  return n;
}

// 4 MiB a wake, then the timers, the dispatch and the replies (the tunes' heartbeats) get
// their turn: tunes bursting 1 MiB SubmitBatches were taken for gone without it (round 8 of
// docs/bench/farm-service.md). And 512 messages at most, whatever their size.
TEST(FarmBrokerReadBudget, AWakeReadsFourMiBOr512Messages) {
  constexpr size_t kMiB = size_t{1} << 20;
  EXPECT_EQ(frames_read_in_one_wake(kMiB, 100), 4);
  EXPECT_EQ(frames_read_in_one_wake(kMiB - 1, 100), 5);  // 4 MiB less 4 bytes after four: one more
  EXPECT_EQ(frames_read_in_one_wake(3 * kMiB, 100), 2);  // the frame that crosses it is read whole
  EXPECT_EQ(frames_read_in_one_wake(16 * kMiB, 100), 1);
  EXPECT_EQ(frames_read_in_one_wake(4096, 10000), 512);  // 2 MiB of small frames: the message bound
  EXPECT_EQ(frames_read_in_one_wake(0, 10000), 512);
  EXPECT_EQ(frames_read_in_one_wake(kMiB, 3), 3);  // fewer waiting: all of them
}

TEST(FarmBroker, BindsAFreeLoopbackPort) {
  FarmBroker broker(fast_options());
  EXPECT_EQ(broker.endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << broker.endpoint();
  EXPECT_NE(broker.endpoint(), "tcp://127.0.0.1:*");
  EXPECT_TRUE(broker.public_key().empty());
}

TEST(FarmBroker, JobsReachOnlyWorkersOfTheirType) {
  FarmBroker broker(fast_options());
  zmq::context_t ctx;
  FakeWorker h100(ctx, broker.endpoint()), a100(ctx, broker.endpoint());
  ASSERT_TRUE(h100.join("h", {"h100"}, 10));
  ASSERT_TRUE(a100.join("a", {"a100"}, 10));
  for (int i = 0; i < 4; ++i) {
    broker.submit(scale_job("h" + std::to_string(i), "h100"));
    broker.submit(scale_job("a" + std::to_string(i), "a100"));
  }
  std::set<std::string> got_h, got_a;
  for (int i = 0; i < 4; ++i) {
    auto jh = h100.next_job(3s);
    auto ja = a100.next_job(3s);
    ASSERT_TRUE(jh && ja);
    EXPECT_EQ(jh->gpu_type(), "h100");
    EXPECT_EQ(ja->gpu_type(), "a100");
    got_h.insert(jh->job_id());
    got_a.insert(ja->job_id());
    EXPECT_EQ(jh->attempt(), 1u);
    h100.result(*jh);
    a100.result(*ja);
  }
  EXPECT_EQ(got_h, (std::set<std::string>{"h0", "h1", "h2", "h3"}));
  EXPECT_EQ(got_a, (std::set<std::string>{"a0", "a1", "a2", "a3"}));
  const auto ms = collect_n(broker, 8, 5s);
  ASSERT_EQ(ms.size(), 8u);
  for (const Measurement& m : ms) {
    EXPECT_EQ(m.status, JobStatus::ok);
    EXPECT_EQ(m.worker, (m.gpu_type == "h100" ? "h/0" : "a/0"));
    EXPECT_DOUBLE_EQ(m.median_us, 6.0);
    EXPECT_DOUBLE_EQ(m.min_us, 5.0);
    EXPECT_DOUBLE_EQ(m.estimate_us, 3.5);
    EXPECT_TRUE(m.emulated);  // the device said so, whatever the result says
    EXPECT_EQ(m.workload, "scale1000");
    EXPECT_EQ(m.source_hash.size(), 16u);
  }
  EXPECT_EQ(broker.status().done, 8);
}

TEST(FarmBroker, CreditsLimitJobsInHand) {
  FarmBroker broker(fast_options());
  zmq::context_t ctx;
  FakeWorker w(ctx, broker.endpoint());
  ASSERT_TRUE(w.join("w", {"h100"}, 2));
  for (int i = 0; i < 5; ++i) broker.submit(scale_job("j" + std::to_string(i), "h100"));
  auto j1 = w.next_job(2s), j2 = w.next_job(2s);
  ASSERT_TRUE(j1 && j2);
  EXPECT_FALSE(w.next_job(300ms)) << "a third job without a third credit";
  // Heartbeats keep it alive meanwhile.
  w.heartbeat();
  EXPECT_TRUE(testing::eventually([&] { return broker.status().in_flight == 2; }));
  EXPECT_EQ(broker.status().queued, 3);
  w.result(*j1);
  w.ready(0, 1);
  auto j3 = w.next_job(2s);
  ASSERT_TRUE(j3);
  EXPECT_EQ(j3->job_id(), "j2");  // queue order
}

TEST(FarmBroker, JobTypeNobodyServesStaysQueued) {
  FarmBroker broker(fast_options());
  zmq::context_t ctx;
  FakeWorker w(ctx, broker.endpoint());
  ASSERT_TRUE(w.join("w", {"h100"}, 5));
  broker.submit(scale_job("t4-job", "t4"));
  broker.submit(scale_job("t4-job2", "t4"));
  EXPECT_FALSE(w.next_job(400ms));
  w.heartbeat();
  const FarmStatus st = broker.status();
  EXPECT_EQ(st.queued, 2);
  EXPECT_EQ(st.in_flight, 0);
  EXPECT_EQ(st.workers_per_gpu_type.at("h100"), 1);
  EXPECT_EQ(st.workers_per_gpu_type.count("t4"), 0u);
  EXPECT_TRUE(broker.collect(10ms).empty());
}

TEST(FarmBroker, SilentWorkersJobIsRequeuedToAnother) {
  FarmBroker broker(fast_options(100ms));  // dead after 300 ms of silence
  zmq::context_t ctx;
  FakeWorker silent(ctx, broker.endpoint());
  ASSERT_TRUE(silent.join("silent", {"h100"}, 1));
  broker.submit(scale_job("j", "h100"));
  auto first = silent.next_job(2s);
  ASSERT_TRUE(first);
  // It never speaks again. A second worker joins and gets the job after 3 missed beats.
  FakeWorker good(ctx, broker.endpoint());
  ASSERT_TRUE(good.join("good", {"h100"}, 1));
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<farm::Job> second;
  while (!second && std::chrono::steady_clock::now() - t0 < 3s) {
    good.heartbeat();
    second = good.next_job(50ms);
  }
  ASSERT_TRUE(second);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 200ms);
  EXPECT_EQ(second->job_id(), "j");
  EXPECT_EQ(second->attempt(), 2u);
  EXPECT_NE(second->lease_id(), first->lease_id());
  // The silent worker's late result is ignored; the good one counts, once.
  silent.result(*first, "ok", {99.0});
  good.result(*second);
  std::vector<Measurement> ms;
  for (int i = 0; i < 20; ++i) {  // ~1 s, the good worker answering heartbeats
    good.next(50ms);
    for (Measurement& m : broker.collect(0ms)) ms.push_back(m);
  }
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].attempts, 2);
  EXPECT_EQ(ms[0].worker, "good/0");
  EXPECT_DOUBLE_EQ(ms[0].median_us, 6.0);
  EXPECT_EQ(broker.counters().sessions_expired, 1);
  EXPECT_GE(broker.counters().requeued, 1);
}

TEST(FarmBroker, AttemptsExhaustedIsWorkerLost) {
  FarmBrokerOptions o = fast_options(100ms);
  o.max_attempts = 2;
  FarmBroker broker(o);
  zmq::context_t ctx;
  broker.submit(scale_job("doomed", "h100"));
  for (int i = 0; i < 2; ++i) {
    FakeWorker w(ctx, broker.endpoint());
    ASSERT_TRUE(w.join("w" + std::to_string(i), {"h100"}, 1));
    auto j = w.next_job(2s);
    ASSERT_TRUE(j);
    EXPECT_EQ(j->attempt(), static_cast<uint32_t>(i + 1));
    // ... and goes silent (its socket stays open: no Bye).
    std::this_thread::sleep_for(450ms);
  }
  const auto ms = collect_n(broker, 1, 2s);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].status, JobStatus::worker_lost);
  EXPECT_EQ(ms[0].attempts, 2);
  EXPECT_NE(ms[0].error.find("attempt 2: worker w1 went silent"), std::string::npos) << ms[0].error;
  EXPECT_TRUE(collect_n(broker, 1, 300ms).empty());  // once
}

// Two workers of one type joined; the job goes to whichever asks first: (taker, other).
std::pair<FakeWorker*, FakeWorker*> first_taker(FakeWorker& a, FakeWorker& b, std::optional<farm::Job>* job) {
  for (int i = 0; i < 200 && !*job; ++i) {
    if ((*job = a.next_job(25ms))) return {&a, &b};
    if ((*job = b.next_job(25ms))) return {&b, &a};
  }
  return {nullptr, nullptr};
}

// internal_error is a dc bug in the worker, not a verdict on the variant: the job goes to
// another worker (the first still has a credit, and is passed over), loudly counted.
TEST(FarmBroker, InternalErrorIsRetriedOnAnotherWorker) {
  FarmBroker broker(fast_options());
  zmq::context_t ctx;
  FakeWorker a(ctx, broker.endpoint()), b(ctx, broker.endpoint());
  ASSERT_TRUE(a.join("a", {"h100"}, 2));
  ASSERT_TRUE(b.join("b", {"h100"}, 2));
  ASSERT_TRUE(testing::eventually([&] { return broker.status().workers_per_gpu_type.count("h100") &&
                                               broker.status().workers_per_gpu_type.at("h100") == 2; },
                                  10s));
  broker.submit(scale_job("j", "h100"));
  // Whichever worker took it reports a dc bug.
  std::optional<farm::Job> first;
  const auto [buggy, other] = first_taker(a, b, &first);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->attempt(), 1u);
  buggy->result(*first, "internal_error", {});
  std::optional<farm::Job> second = other->next_job(10s);
  ASSERT_TRUE(second) << "the job must go to the other worker";
  EXPECT_EQ(second->job_id(), "j");
  EXPECT_EQ(second->attempt(), 2u);
  EXPECT_FALSE(buggy->next_job(200ms)) << "and not again to the one that failed it";
  other->result(*second);
  const auto ms = collect_n(broker, 1, 10s);
  ASSERT_EQ(ms.size(), 1u) << "one result: the internal error is not one";
  EXPECT_EQ(ms[0].status, JobStatus::ok);
  EXPECT_EQ(ms[0].attempts, 2);
  EXPECT_TRUE(testing::eventually([&] { return broker.counters().internal_errors == 1; }, 10s));
  EXPECT_EQ(broker.counters().requeued, 0) << "requeued counts lost leases only";
}

// A device that refused to time (unhealthy: slowed for power or heat, ECC errors) hands the
// job on: it goes to another worker, is counted, and the variant's one result is that worker's.
TEST(FarmBroker, UnhealthyDeviceHandsTheJobToAnotherWorker) {
  FarmBroker broker(fast_options());
  zmq::context_t ctx;
  FakeWorker a(ctx, broker.endpoint()), b(ctx, broker.endpoint());
  ASSERT_TRUE(a.join("a", {"h100"}, 2));
  ASSERT_TRUE(b.join("b", {"h100"}, 2));
  ASSERT_TRUE(testing::eventually([&] { return broker.status().workers_per_gpu_type.count("h100") &&
                                               broker.status().workers_per_gpu_type.at("h100") == 2; },
                                  10s));
  broker.submit(scale_job("j", "h100"));
  std::optional<farm::Job> first;
  const auto [hot, other] = first_taker(a, b, &first);
  ASSERT_TRUE(first);
  hot->result(*first, "unhealthy", {});
  std::optional<farm::Job> second = other->next_job(10s);
  ASSERT_TRUE(second) << "the job must go to the other worker";
  EXPECT_EQ(second->attempt(), 2u);
  EXPECT_FALSE(hot->next_job(200ms)) << "and not again to the unhealthy one";
  other->result(*second);
  const auto ms = collect_n(broker, 1, 10s);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].status, JobStatus::ok);
  EXPECT_EQ(ms[0].attempts, 2);
  EXPECT_TRUE(testing::eventually([&] { return broker.counters().unhealthy == 1; }, 10s));
  EXPECT_EQ(broker.counters().internal_errors, 0);
}

// FarmJob::avoid_workers (a finalist's first worker, a quarantined worker: docs/tune.md)
// names workers as the broker's Measurements do ("<worker id>/<device>"): such a job goes to
// another worker of its type while one is connected, and to an avoided one only when not.
TEST(FarmBroker, AJobAvoidsTheWorkersItNamesWhileAnotherServesItsType) {
  FarmBroker broker(fast_options());
  zmq::context_t ctx;
  FakeWorker a(ctx, broker.endpoint()), b(ctx, broker.endpoint());
  ASSERT_TRUE(a.join("a", {"h100"}, 2));
  ASSERT_TRUE(b.join("b", {"h100"}, 2));
  ASSERT_TRUE(testing::eventually([&] { return broker.status().workers_per_gpu_type.count("h100") &&
                                               broker.status().workers_per_gpu_type.at("h100") == 2; },
                                  10s));
  for (const char* id : {"j1", "j2"}) {
    FarmJob j = scale_job(id, "h100");
    j.avoid_workers = {"a/0"};
    broker.submit(std::move(j));
  }
  std::optional<farm::Job> j1 = b.next_job(10s), j2 = b.next_job(10s);
  ASSERT_TRUE(j1 && j2) << "both jobs go to the worker they do not avoid";
  EXPECT_FALSE(a.next_job(300ms)) << "and none to the avoided one, though it has credits";
  b.result(*j1);
  b.result(*j2);
  const auto ms = collect_n(broker, 2, 10s);
  ASSERT_EQ(ms.size(), 2u);
  for (const Measurement& m : ms) EXPECT_EQ(m.worker, "b/0");
  // Every worker of the type avoided: one of them takes it all the same.
  FarmJob k = scale_job("k", "h100");
  k.avoid_workers = {"a/0", "b/0"};
  broker.submit(std::move(k));
  std::optional<farm::Job> taken;
  first_taker(a, b, &taken);
  EXPECT_TRUE(taken) << "a job that avoids every worker must not wait for ever";
}

// With no other worker of the type, the same worker gets it again; after max_attempts the
// job ends as internal_error, with every attempt's error.
TEST(FarmBroker, InternalErrorsExhaustTheAttemptsThenAreReported) {
  FarmBrokerOptions o = fast_options();
  o.max_attempts = 2;
  FarmBroker broker(o);
  zmq::context_t ctx;
  FakeWorker w(ctx, broker.endpoint());
  ASSERT_TRUE(w.join("alone", {"h100"}, 1));
  broker.submit(scale_job("j", "h100"));
  for (uint32_t attempt = 1; attempt <= 2; ++attempt) {
    const std::optional<farm::Job> j = w.next_job(10s);
    ASSERT_TRUE(j) << "attempt " << attempt;
    EXPECT_EQ(j->attempt(), attempt);
    farm::Envelope e;
    farm::Result* r = e.mutable_result();
    r->set_lease_id(j->lease_id());
    r->set_job_id(j->job_id());
    r->set_device_index(j->device_index());
    r->set_status("internal_error");
    r->set_error("internal error in the worker: bug " + std::to_string(attempt));
    w.send(e);
    w.ready(0, 1);
  }
  const auto ms = collect_n(broker, 1, 10s);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].status, JobStatus::internal_error);
  EXPECT_EQ(ms[0].attempts, 2);
  EXPECT_NE(ms[0].error.find("attempt 1: internal error on worker alone: internal error in the worker: bug 1"),
            std::string::npos) << ms[0].error;
  EXPECT_NE(ms[0].error.find("attempt 2:"), std::string::npos) << ms[0].error;
  EXPECT_EQ(broker.counters().internal_errors, 2);
  EXPECT_TRUE(collect_n(broker, 1, 300ms).empty());  // once
}

// The broker's own invariant failure ends the farm: the caller's next collect, submit or
// status throws it as an InternalError (exit 3 from the CLI) instead of the loop going on.
// Jobs submitted with it are never dispatched twice (no moved-from entry is re-submitted).
TEST(FarmBroker, ItsOwnInternalErrorEndsTheFarm) {
  FarmBroker broker(fast_options());
  zmq::context_t ctx;
  FakeWorker w(ctx, broker.endpoint());
  ASSERT_TRUE(w.join("w", {"h100"}, 8));
  broker.submit(scale_job("before", "h100"));
  broker.submit(scale_job("no-type", ""));  // the coordinator never plans such a job
  bool thrown = false;
  auto check = [&](const InternalError& e) {
    thrown = true;
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("farm broker: ", 0), 0u) << what;
    EXPECT_NE(what.find("job 'no-type' was submitted without a GPU type"), std::string::npos) << what;
  };
  // The broker's thread may already have stopped on "no-type" (a slow machine, TSan): then
  // this submit is the first call to throw.
  try {
    broker.submit(scale_job("after", "h100"));
  } catch (const InternalError& e) {
    check(e);
  }
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!thrown && std::chrono::steady_clock::now() < until) {
    try {
      broker.collect(50ms);
    } catch (const InternalError& e) {
      check(e);
    }
  }
  ASSERT_TRUE(thrown);
  EXPECT_THROW(broker.submit(scale_job("later", "h100")), InternalError);
  EXPECT_THROW(broker.status(), InternalError);
  std::multiset<std::string> seen;
  while (std::optional<farm::Envelope> e = w.next(300ms))
    if (e->has_job()) seen.insert(e->job().job_id());
  EXPECT_LE(seen.count("before"), 1u);
  EXPECT_EQ(seen.count("after"), 0u);
  EXPECT_EQ(seen.count(""), 0u) << "a moved-from entry was dispatched";
  broker.shutdown();  // still clean
}

TEST(FarmBroker, ByeRequeuesWhatTheWorkerHeld) {
  FarmBroker broker(fast_options());
  zmq::context_t ctx;
  FakeWorker leaving(ctx, broker.endpoint()), staying(ctx, broker.endpoint());
  ASSERT_TRUE(leaving.join("leaving", {"h100"}, 1));
  broker.submit(scale_job("j", "h100"));
  auto j = leaving.next_job(2s);
  ASSERT_TRUE(j);
  ASSERT_TRUE(staying.join("staying", {"h100"}, 1));
  farm::Envelope bye;
  bye.mutable_bye()->set_reason("test");
  leaving.send(bye);
  auto again = staying.next_job(2s);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->job_id(), "j");
  EXPECT_EQ(again->attempt(), 2u);
}

TEST(FarmBroker, DeadlinePassedIsTimeoutAndLateResultIgnored) {
  FarmBroker broker(fast_options());
  zmq::context_t ctx;
  FakeWorker w(ctx, broker.endpoint());
  ASSERT_TRUE(w.join("slow", {"h100"}, 1));
  FarmJob job = scale_job("slow-job", "h100");
  job.compile_deadline = 100ms;
  job.run_deadline = 100ms;  // + 200 ms grace: the lease ends after 400 ms
  broker.submit(job);
  auto j = w.next_job(2s);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->compile_deadline_ms(), 100u);
  std::vector<Measurement> ms;
  const auto t0 = std::chrono::steady_clock::now();
  while (ms.empty() && std::chrono::steady_clock::now() - t0 < 3s) {
    w.heartbeat();  // alive, just slow
    for (auto& m : broker.collect(50ms)) ms.push_back(m);
  }
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 300ms);
  EXPECT_EQ(ms[0].status, JobStatus::timeout);
  EXPECT_EQ(ms[0].worker, "slow/0");
  EXPECT_NE(ms[0].error.find("no result within the deadline"), std::string::npos) << ms[0].error;
  w.result(*j);
  EXPECT_TRUE(collect_n(broker, 1, 300ms).empty());
  EXPECT_EQ(broker.counters().ignored_results, 1);
  EXPECT_EQ(broker.counters().expired_leases, 1);
}

TEST(FarmBroker, DuplicateAndForeignResultsCountOnce) {
  FarmBroker broker(fast_options());
  zmq::context_t ctx;
  FakeWorker w(ctx, broker.endpoint()), other(ctx, broker.endpoint());
  ASSERT_TRUE(w.join("w", {"h100"}, 1));
  ASSERT_TRUE(other.join("other", {"h100"}, 0));
  broker.submit(scale_job("j", "h100"));
  auto j = w.next_job(2s);
  ASSERT_TRUE(j);
  other.result(*j, "ok", {1.0});  // not its lease
  w.result(*j, "ok", {4.0});
  w.result(*j, "ok", {8.0});      // again
  const auto ms = collect_n(broker, 2, 800ms);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_DOUBLE_EQ(ms[0].median_us, 4.0);
  EXPECT_EQ(broker.counters().ignored_results, 2);
}

TEST(FarmBroker, InvalidResultIsDroppedAndTheLeaseRunsOn) {
  FarmBroker broker(fast_options());
  zmq::context_t ctx;
  FakeWorker w(ctx, broker.endpoint());
  ASSERT_TRUE(w.join("w", {"h100"}, 1));
  broker.submit(scale_job("j", "h100"));
  auto j = w.next_job(2s);
  ASSERT_TRUE(j);
  w.result(*j, "splendid");               // no such status
  w.result(*j, "ok", {});                 // ok without samples
  w.result(*j, "ok", {-1.0});             // negative time
  EXPECT_TRUE(collect_n(broker, 1, 300ms).empty());
  EXPECT_EQ(broker.counters().invalid_messages, 3);
  w.result(*j, "wrong_result", {});
  const auto ms = collect_n(broker, 1, 1s);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].status, JobStatus::wrong_result);
}

TEST(FarmBroker, GarbageFramesAreDroppedAndValidWorkersServed) {
  FarmBrokerOptions o = fast_options();
  o.max_message_bytes = 64 * 1024;
  FarmBroker broker(o);
  zmq::context_t ctx;
  FakeWorker good(ctx, broker.endpoint());
  ASSERT_TRUE(good.join("good", {"h100"}, 100));
  FakeWorker evil(ctx, broker.endpoint());
  std::mt19937 rng(123);
  for (int i = 0; i < 300; ++i) {
    std::string junk(rng() % 200, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    evil.send_raw({junk});
  }
  evil.send_raw({""});                                // empty frame
  evil.send_raw({"a", "b", "c"});                     // three frames
  farm::Envelope no_body;
  no_body.set_protocol_version(1);
  evil.send_raw({farm::serialize(no_body)});          // no body
  farm::Envelope v9;
  v9.mutable_ready()->set_credits(1000);
  v9.set_protocol_version(9);
  evil.send(v9, true);                                // another version
  farm::Envelope stray;
  stray.mutable_welcome()->set_heartbeat_ms(1);
  evil.send(stray);                                   // only coordinators send that (and no Hello yet)
  // A valid worker keeps being served meanwhile.
  for (int i = 0; i < 20; ++i) broker.submit(scale_job("j" + std::to_string(i), "h100"));
  int served = 0;
  while (auto j = good.next_job(2s)) {
    good.result(*j);
    if (++served == 20) break;
  }
  EXPECT_EQ(served, 20);
  EXPECT_EQ(collect_n(broker, 20, 3s).size(), 20u);
  // The evil connection's frames may still wait behind the good worker's (ZeroMQ queues per
  // connection): let the broker read them, up to a deadline.
  for (int turn = 0; turn < 60 && broker.counters().dropped_frames < 250; ++turn) broker.collect(50ms);
  EXPECT_GE(broker.counters().dropped_frames, 250);  // some random frames parse as empty envelopes
  // An oversized frame makes libzmq drop the connection; the broker carries on.
  FakeWorker huge(ctx, broker.endpoint());
  huge.send_raw({std::string(200 * 1024, 'x')});
  broker.submit(scale_job("after", "h100"));
  auto j = good.next_job(2s);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->job_id(), "after");
}

// An unknown version, version 2, whose workers would drop version 3's job batches unread, and
// version 3, whose workers would drop a whole batch of version 4 for one job that does not parse.
TEST(FarmBroker, WrongProtocolVersionIsRefused) {
  for (int version : {7, 2, 3}) {
    SCOPED_TRACE(version);
    FarmBroker broker(fast_options());
    zmq::context_t ctx;
    FakeWorker w(ctx, broker.endpoint());
    w.hello("old", {"h100"}, version);
    auto e = w.next(2s);
    ASSERT_TRUE(e);
    ASSERT_TRUE(e->has_refused());
    EXPECT_NE(e->refused().reason().find("protocol version " + std::to_string(version) +
                                         " is not supported (this coordinator speaks 4)"),
              std::string::npos) << e->refused().reason();
    EXPECT_TRUE(testing::eventually([&] { return broker.counters().refused_hellos == 1; }));
    // Refused workers get no jobs.
    broker.submit(scale_job("j", "h100"));
    EXPECT_FALSE(w.next_job(300ms));
    EXPECT_EQ(broker.status().workers_per_gpu_type.count("h100"), 0u);
  }
}

TEST(FarmBroker, TheJobsOfOneDispatchTravelInOneBatch) {
  FarmBroker broker(fast_options());
  zmq::context_t ctx;
  FakeWorker w(ctx, broker.endpoint());
  ASSERT_TRUE(w.join("w", {"h100"}, 0));
  for (int i = 0; i < 8; ++i) broker.submit(scale_job("j" + std::to_string(i), "h100"));
  ASSERT_TRUE(testing::eventually([&] { return broker.status().queued == 8; }));
  w.ready(0, 8);
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i)
    if (auto j = w.next_job(2s)) ids.push_back(j->job_id());
  ASSERT_EQ(ids.size(), 8u);
  EXPECT_EQ(ids.front(), "j0");  // queue order within the batch
  EXPECT_EQ(ids.back(), "j7");
  EXPECT_EQ(w.batches, 1) << "one message for the eight jobs of one dispatch";
  EXPECT_EQ(w.largest_batch, 8);
}

TEST(FarmBroker, AResultBatchCountsEachResultOnceThenGrantsItsCredits) {
  FarmBroker broker(fast_options());
  zmq::context_t ctx;
  FakeWorker w(ctx, broker.endpoint());
  ASSERT_TRUE(w.join("w", {"h100"}, 2));
  for (int i = 0; i < 3; ++i) broker.submit(scale_job("j" + std::to_string(i), "h100"));
  auto j0 = w.next_job(2s), j1 = w.next_job(2s);
  ASSERT_TRUE(j0 && j1);
  farm::Envelope e;
  farm::ResultBatch* b = e.mutable_results();
  for (const farm::Job* j : {&*j0, &*j1, &*j0}) {  // j0 twice: the second is a duplicate
    farm::Result* r = b->add_results();
    r->set_lease_id(j->lease_id());
    r->set_job_id(j->job_id());
    r->set_status("ok");
    r->set_device_index(0);
    r->add_samples_us(j == &*j0 ? 4.0 : 6.0);
  }
  b->add_ready()->set_device_index(0);
  b->mutable_ready(0)->set_credits(1);
  w.send(e);
  const auto ms = collect_n(broker, 2, 2s);
  ASSERT_EQ(ms.size(), 2u);
  std::map<std::string, double> median;
  for (const Measurement& m : ms) median[m.job_id] = m.median_us;
  EXPECT_DOUBLE_EQ(median["j0"], 4.0);
  EXPECT_DOUBLE_EQ(median["j1"], 6.0);
  EXPECT_EQ(broker.counters().ignored_results, 1);
  // The batch's credit: the third job.
  auto j2 = w.next_job(2s);
  ASSERT_TRUE(j2);
  EXPECT_EQ(j2->job_id(), "j2");
  EXPECT_FALSE(w.next_job(300ms)) << "one credit granted, one job";
}

TEST(FarmBroker, BadInventoriesAreRefused) {
  FarmBrokerOptions o = fast_options();
  o.require_emulated = false;  // real GPUs only
  FarmBroker broker(o);
  zmq::context_t ctx;
  FakeWorker none(ctx, broker.endpoint()), emulated(ctx, broker.endpoint());
  none.hello("none", {});
  auto e = none.next(2s);
  ASSERT_TRUE(e && e->has_refused());
  emulated.hello("emu", {"h100"});
  e = emulated.next(2s);
  ASSERT_TRUE(e && e->has_refused());
  EXPECT_NE(e->refused().reason().find("real GPUs only"), std::string::npos);
}

TEST(FarmBroker, UnknownSessionIsToldToSayHello) {
  FarmBroker broker(fast_options());
  zmq::context_t ctx;
  FakeWorker w(ctx, broker.endpoint());
  w.ready(0, 1);
  auto e = w.next(2s);
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->has_disconnect());
}

TEST(FarmBroker, ReconnectedWorkerKeepsTheLeasesItHolds) {
  FarmBroker broker(fast_options());
  zmq::context_t ctx;
  auto first = std::make_unique<FakeWorker>(ctx, broker.endpoint());
  ASSERT_TRUE(first->join("daemon", {"h100"}, 2));
  broker.submit(scale_job("kept", "h100"));
  broker.submit(scale_job("dropped", "h100"));
  auto a = first->next_job(2s), b = first->next_job(2s);
  ASSERT_TRUE(a && b);
  const farm::Job kept = a->job_id() == "kept" ? *a : *b;
  first->close();  // the connection is gone; the daemon says Hello on a new one
  FakeWorker second(ctx, broker.endpoint());
  second.hello("daemon", {"h100"}, farm::kProtocolVersion, {kept.lease_id()});
  auto w = second.next(2s);
  ASSERT_TRUE(w && w->has_welcome());
  second.ready(0, 1);
  // "dropped" was requeued (attempt 2) to the new session; "kept" is still leased.
  auto again = second.next_job(2s);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->job_id(), "dropped");
  EXPECT_EQ(again->attempt(), 2u);
  second.result(kept);
  second.result(*again);
  const auto ms = collect_n(broker, 2, 2s);
  ASSERT_EQ(ms.size(), 2u);
  for (const auto& m : ms) EXPECT_EQ(m.status, JobStatus::ok);
  EXPECT_EQ(broker.counters().requeued, 1);
}

TEST(FarmBroker, ShutdownDisconnectsWorkersAndKeepsResults) {
  auto broker = std::make_unique<FarmBroker>(fast_options());
  zmq::context_t ctx;
  FakeWorker w(ctx, broker->endpoint());
  ASSERT_TRUE(w.join("w", {"h100"}, 1));
  broker->submit(scale_job("j", "h100"));
  auto j = w.next_job(2s);
  ASSERT_TRUE(j);
  w.result(*j);
  std::this_thread::sleep_for(200ms);
  broker->shutdown();
  auto e = w.next(2s);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->has_disconnect());
  EXPECT_EQ(broker->collect(10ms).size(), 1u);
  broker->submit(scale_job("late", "h100"));  // ignored, no crash
  broker->shutdown();                          // idempotent
}

TEST(FarmBroker, NonLoopbackNeedsCurveOrInsecure) {
  FarmBrokerOptions o = fast_options();
  o.endpoint = "tcp://0.0.0.0:*";
  try {
    FarmBroker broker(o);
    FAIL() << "bound to every interface without CURVE";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--insecure"), std::string::npos) << e.what();
  }
  o.insecure = true;
  FarmBroker broker(o);
  EXPECT_EQ(broker.endpoint().rfind("tcp://0.0.0.0:", 0), 0u);
}

TEST(FarmBroker, CurveAdmitsOnlyAllowedKeys) {
  const farm::CurveKeyPair server = farm::generate_curve_keypair();
  const farm::CurveKeyPair allowed = farm::generate_curve_keypair();
  const farm::CurveKeyPair stranger = farm::generate_curve_keypair();
  FarmBrokerOptions o = fast_options();
  o.endpoint = "tcp://0.0.0.0:*";
  o.curve_secret_key = server.secret_key;
  o.allowed_worker_keys = {allowed.public_key};
  FarmBroker broker(o);
  EXPECT_EQ(broker.public_key(), server.public_key);
  const std::string port = broker.endpoint().substr(broker.endpoint().rfind(':'));
  zmq::context_t ctx;
  auto curve_worker = [&](const farm::CurveKeyPair& keys) {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::curve_serverkey, server.public_key);
    s.set(zmq::sockopt::curve_publickey, keys.public_key);
    s.set(zmq::sockopt::curve_secretkey, keys.secret_key);
    s.connect("tcp://127.0.0.1" + port);
    farm::Envelope e = farm::make_envelope();
    e.mutable_hello()->set_worker_id("curve");
    farm::GpuInventory* g = e.mutable_hello()->add_gpus();
    g->set_gpu_type("h100");
    s.send(zmq::buffer(farm::serialize(e)), zmq::send_flags::none);
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(1500));
    zmq::message_t m;
    if (!(item.revents & ZMQ_POLLIN) || !s.recv(m, zmq::recv_flags::dontwait)) return std::string("nothing");
    auto r = farm::parse_envelope(m.data(), m.size(), farm::kDefaultMaxMessageBytes, nullptr);
    return std::string(r ? farm::body_name(*r) : "garbage");
  };
  EXPECT_EQ(curve_worker(stranger), "nothing");
  EXPECT_EQ(curve_worker(allowed), "welcome");
  EXPECT_TRUE(testing::eventually([&] { return broker.counters().refused_hellos == 0 && broker.status().workers_per_gpu_type.count("h100") == 1; }));
  // A plain-text worker cannot even complete the handshake.
  FakeWorker plain(ctx, "tcp://127.0.0.1" + port);
  plain.hello("plain", {"h100"});
  EXPECT_FALSE(plain.next(500ms));
}

TEST(FarmBroker, CurveOptionsAreChecked) {
  FarmBrokerOptions o = fast_options();
  o.curve_secret_key = "not a key";
  o.allowed_worker_keys = {farm::generate_curve_keypair().public_key};
  EXPECT_THROW(FarmBroker{o}, UserError);
  o.curve_secret_key = farm::generate_curve_keypair().secret_key;
  o.allowed_worker_keys.clear();
  EXPECT_THROW(FarmBroker{o}, UserError);
}

}  // namespace
}  // namespace dc
