// Calibration through the farm service (docs/farm.md, "Calibration through the service"): the
// estimator's ratios on the wire (ratios_codec.h), the service's answer from its DB, the
// refusal of an older client, and a `tune --farm` whose calibrate stage fits its factors from
// the service's DB as a local tune fits them from its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include <zmq.hpp>

#include "calibration_fit.h"
#include "client_codec.h"
#include "farm_codec.h"
#include "farm_inprocess.h"
#include "farm_service_testing.h"
#include "farm_testing.h"
#include "gpu/gpu_catalog.h"
#include "rank_fit_db.h"
#include "ratios_codec.h"
#include "tune.h"
#include "tune_stages.h"
#include "tuning_db_testing.h"

namespace dc {
namespace {

using namespace service_testing;
using testing::test_gpu;
using testing::test_measurement;
using testing::test_variant;
using testing::test_worker;
using testing::test_workload;

// A check that `decode` refuses a copy of the valid reply spoiled by `spoil` (a ProtocolError).
template <class Decode>
auto refused_by(const farm::RatiosReply& valid, Decode decode) {
  return [&valid, decode](const std::function<void(farm::RatiosReply&)>& spoil) {
    farm::RatiosReply r = valid;
    spoil(r);
    EXPECT_THROW((void)decode(r), farm::ProtocolError);
  };
}

std::vector<double> sorted(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v;
}

KindUnitRatios sorted(KindUnitRatios r) {
  for (auto& [key, v] : r) v = sorted(std::move(v));
  return r;
}

TEST(FarmServiceRatios, BoundedRatiosAreTheUsableOnesSortedAndKeepTheMedianPastTheLimit) {
  EXPECT_EQ(bounded_ratios({3, NAN, -1, 0, 1, INFINITY, 2}), (std::vector<double>{1, 2, 3}));
  // 20,001 ratios, shuffled: 4,097 sent, the smallest, the largest and the median among them,
  // so the fit the client makes of them is the fit of them all.
  std::vector<double> many;
  for (int i = 0; i < 20001; ++i) many.push_back(std::exp(0.001 * (i - 9000)));
  std::shuffle(many.begin(), many.end(), std::mt19937(7));
  const std::vector<double> sent = bounded_ratios(many);
  ASSERT_EQ(sent.size(), kMaxRatiosPerUnit);
  EXPECT_TRUE(std::is_sorted(sent.begin(), sent.end()));
  EXPECT_EQ(sent.front(), *std::min_element(many.begin(), many.end()));
  EXPECT_EQ(sent.back(), *std::max_element(many.begin(), many.end()));
  EXPECT_DOUBLE_EQ(sent[sent.size() / 2], std::exp(0.001 * (10000 - 9000)));
  const auto full = fit_calibration(KindUnitRatios{{{ClusterKind::conv, MathUnit::fp32}, many}});
  const auto part = fit_calibration(KindUnitRatios{{{ClusterKind::conv, MathUnit::fp32}, sent}});
  ASSERT_EQ(full.size(), 1u);
  ASSERT_EQ(part.size(), 1u);
  EXPECT_DOUBLE_EQ(part[0].factor, full[0].factor);
  EXPECT_NEAR(full[0].factor, std::exp(1.0), 1e-9);
}

TEST(FarmServiceRatios, AReplyCarriesEveryKindAndUnitAndAnInvalidOneIsAProtocolError) {
  const KindUnitRatios ratios = {{{ClusterKind::conv, MathUnit::fp32}, {1.5, 0.5, 1.0}},
                                 {{ClusterKind::gemm, MathUnit::tf32}, {2.0}},
                                 {{ClusterKind::gemm, MathUnit::fp16_bf16}, {0.25, NAN, 0.75}},
                                 {{ClusterKind::attention, MathUnit::fp32}, {-1.0}}};  // nothing usable
  farm::RatiosReply reply;
  to_proto(ratios, &reply);
  ASSERT_EQ(reply.units_size(), 3);
  EXPECT_EQ(ratios_from_proto(reply), (KindUnitRatios{{{ClusterKind::conv, MathUnit::fp32}, {0.5, 1.0, 1.5}},
                                                      {{ClusterKind::gemm, MathUnit::tf32}, {2.0}},
                                                      {{ClusterKind::gemm, MathUnit::fp16_bf16}, {0.25, 0.75}}}));
  for (const farm::UnitRatios& u : reply.units()) {
    if (u.kind() == "gemm" && u.unit() == farm::UNIT_FP16_BF16) {
      EXPECT_EQ(u.total(), 2);
    }
  }

  const auto invalid = refused_by(reply, [](const farm::RatiosReply& r) { return ratios_from_proto(r); });
  invalid([](farm::RatiosReply& r) { r.mutable_units(0)->set_kind("convolution"); });
  invalid([](farm::RatiosReply& r) { r.mutable_units(0)->set_unit(static_cast<farm::MathUnitCode>(7)); });
  invalid([](farm::RatiosReply& r) { *r.add_units() = r.units(0); });
  invalid([](farm::RatiosReply& r) { r.mutable_units(1)->add_ratios(NAN); });
  invalid([](farm::RatiosReply& r) { r.mutable_units(1)->add_ratios(0); });
  invalid([](farm::RatiosReply& r) {
    for (size_t i = 0; i < kMaxRatiosPerUnit; ++i) r.mutable_units(1)->add_ratios(1.0);
  });
}

// A service DB with results of h100 (real and emulated, two kinds) and of a100.
std::unique_ptr<TuningDb> db_with_ratios() {
  auto db = make_memory_db();
  db->commit_gpu_type(test_gpu("h100", "hopper", 9, 0));
  db->commit_gpu_type(test_gpu("a100", "ampere", 8, 0));
  const WorkerInfo real = test_worker("node1", "h100", false), emulated = test_worker("laptop", "h100", true),
                   a100 = test_worker("node2", "a100", false);
  for (const WorkerInfo& w : {real, emulated, a100}) db->commit_worker(w);
  db->commit_workload(test_workload("w1", ClusterKind::gemm));
  db->commit_workload(test_workload("w2", ClusterKind::conv));
  for (const char* w : {"w1", "w2"})
    for (int64_t bm : {32, 64}) db->commit_variant(w, test_variant(bm), "hash");
  int64_t finished = 1000;
  const auto add = [&](const char* w, int64_t bm, const WorkerInfo& worker, double median, double estimate) {
    Measurement m = test_measurement(w, test_variant(bm), worker, median, ++finished);
    m.estimate_us = estimate;
    EXPECT_TRUE(db->commit_measurement(m));
  };
  add("w1", 32, real, 2, 4);
  add("w1", 64, real, 6, 4);
  add("w2", 32, real, 8, 4);
  add("w1", 64, emulated, 40, 4);
  add("w2", 64, a100, 12, 4);
  return db;
}

TEST(FarmServiceRatios, ATuneGetsTheRatiosOfTheServicesDbForItsGpuTypeSourceAndStorage) {
  auto db = db_with_ratios();
  Service service(*db);
  RemoteFarm client_farm(client(service.endpoint(), "m", 1));
  const auto ratios = [&](const std::string& gpu, bool emulated, const std::string& storage) {
    const auto r = client_farm.estimator_ratios(gpu, emulated, storage, /*rank_vectors=*/false);
    EXPECT_TRUE(r.has_value());
    return r ? r->by_unit : KindUnitRatios{};
  };
  const KindUnitRatios real = ratios("h100", /*emulated=*/false, "");
  EXPECT_EQ(real, sorted(db->estimator_ratios("h100", TimingSource::real)));
  EXPECT_EQ(real.at({ClusterKind::gemm, MathUnit::fp32}), (std::vector<double>{0.5, 1.5}));
  EXPECT_EQ(ratios("h100", true, "").at({ClusterKind::gemm, MathUnit::fp32}), std::vector<double>{10.0});
  EXPECT_EQ(ratios("a100", false, "").at({ClusterKind::conv, MathUnit::fp32}), std::vector<double>{3.0});
  // Storage: the test workloads are f32.
  EXPECT_EQ(ratios("h100", false, "f32"), real);
  EXPECT_TRUE(ratios("h100", false, "f16").empty());
  // A GPU type the service does not know has none (no refusal: the tune goes on).
  EXPECT_TRUE(ratios("no-such-gpu", false, "").empty());
}

// The service keeps its answer while the DB's rows stay as they were: a result it records, or
// one another connection commits to the file, is in the next answer.
TEST(FarmServiceRatios, AnAnswerKeptByTheServiceFollowsEveryNewResult) {
  testing::TempDir dir;
  const std::string path = dir.file("service.db");
  auto db = open_tuning_db(path);
  db->commit_gpu_type(test_gpu("h100", "hopper", 9, 0));
  const WorkerInfo real = test_worker("node1", "h100", false);
  db->commit_worker(real);
  db->commit_workload(test_workload("w1", ClusterKind::gemm));
  for (int64_t bm : {32, 64, 128}) db->commit_variant("w1", test_variant(bm), "hash");
  const auto add = [&](TuningDb& to, int64_t bm, double median, int64_t finished) {
    Measurement m = test_measurement("w1", test_variant(bm), real, median, finished);
    m.estimate_us = 4;
    EXPECT_TRUE(to.commit_measurement(m));
  };
  add(*db, 32, 2, 1001);
  Service service(*db);
  RemoteFarm client_farm(client(service.endpoint(), "m", 1));
  const auto gemm = [&] {
    const auto r = client_farm.estimator_ratios("h100", false, "", /*rank_vectors=*/false);
    EXPECT_TRUE(r.has_value());
    return r ? r->by_unit.at({ClusterKind::gemm, MathUnit::fp32}) : std::vector<double>{};
  };
  EXPECT_EQ(gemm(), std::vector<double>{0.5});
  EXPECT_EQ(gemm(), std::vector<double>{0.5});  // asked again: the same
  add(*db, 64, 6, 1002);  // through the service's own connection
  EXPECT_EQ(gemm(), (std::vector<double>{0.5, 1.5}));
  add(*open_tuning_db(path), 128, 8, 1003);  // another connection to the file
  EXPECT_EQ(gemm(), (std::vector<double>{0.5, 1.5, 2.0}));
}

// A key with its precision: one the ranking fit parses.
Variant ranked_variant(int64_t block_m) {
  Variant v = test_variant(block_m);
  v.precision = "fp32";
  return v;
}

// Four gemm workloads of real h100 results where block_m 64 ran 1.5x block_m 32 (the estimates
// alike), and emulated results of the same variants at random: enough for the per-parameter
// factors and the ranking vector of the variants' template, into `db`.
void add_ranked_results(TuningDb* db) {
  const auto variant = ranked_variant;
  db->commit_gpu_type(test_gpu("h100", "hopper", 9, 0));
  const WorkerInfo real = test_worker("node1", "h100", false), emulated = test_worker("laptop", "h100", true);
  db->commit_worker(real);
  db->commit_worker(emulated);
  int64_t finished = 1000;
  for (int w = 0; w < 4; ++w) {
    const std::string sig = "w" + std::to_string(w);
    db->commit_workload(test_workload(sig, ClusterKind::gemm));
    for (int64_t bm : {32, 64})
      for (int rep = 0; rep < 2; ++rep) {
        db->commit_variant(sig, variant(bm), "hash");
        EXPECT_TRUE(db->commit_measurement(test_measurement(sig, variant(bm), real, (w + 1) * (bm == 64 ? 6.0 : 4.0), ++finished)));
        const double noise = 1.0 + static_cast<double>(finished % 7);
        EXPECT_TRUE(db->commit_measurement(test_measurement(sig, variant(bm), emulated, noise, ++finished)));
      }
  }
}

// The service fits what a local tune fits from the same DB: the per-parameter factors, and,
// for a request that asks (tune --rank-calibration), the ranking vector of the variants'
// template; a request that does not ask (every other tune, and a client that does not know the
// field) gets the factors and no vector.
TEST(FarmServiceRatios, TheFactorsAndRankingVectorsOfRealResultsComeWithTheRatios) {
  const auto variant = ranked_variant;
  testing::TempDir dir;
  auto db = open_tuning_db(dir.file("service.db"));  // a file: the service keeps its answers
  add_ranked_results(db.get());
  const GpuCatalog catalog = GpuCatalog::builtin();
  const GpuSpec& h100 = catalog.require("h100");
  const std::vector<EstimatorSample> samples = db->estimator_samples("h100", TimingSource::real, "");
  const std::vector<FittedRankVector> want = fit_rank_vectors_of_db(*db, h100, samples);
  ASSERT_EQ(want.size(), 1u);
  const std::vector<FittedParamFactor> want_params = fit_param_factors("h100", samples);
  ASSERT_FALSE(want_params.empty());
  Service service(*db);
  RemoteFarm client_farm(client(service.endpoint(), "m", 1));
  // Not asked first: the answer the service keeps of it must not answer the request that asks.
  for (const bool rank_vectors : {false, true}) {
    SCOPED_TRACE(rank_vectors ? "ranking vectors asked" : "ranking vectors not asked");
    const auto got = client_farm.estimator_ratios("h100", false, "", rank_vectors);
    ASSERT_TRUE(got.has_value());
    ASSERT_EQ(got->param_fit.size(), want_params.size());
    for (size_t i = 0; i < want_params.size(); ++i) {
      EXPECT_EQ(got->param_fit[i].group, want_params[i].group);
      EXPECT_EQ(got->param_fit[i].param, want_params[i].param);
      EXPECT_EQ(got->param_fit[i].value, want_params[i].value);
      EXPECT_DOUBLE_EQ(got->param_fit[i].factor, want_params[i].factor);
    }
    Calibration factors;
    apply_param_fit(got->param_fit, factors);
    EXPECT_GT(factors.variant_factor("h100", ClusterKind::gemm, variant(64).key()) /
                  factors.variant_factor("h100", ClusterKind::gemm, variant(32).key()), 1.01);  // 1.5, shrunk
    EXPECT_EQ(got->rank_fit.size(), rank_vectors ? 1u : 0u);
  }
  const auto got = client_farm.estimator_ratios("h100", false, "", /*rank_vectors=*/true);
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ(got->rank_fit.size(), 1u);
  EXPECT_EQ(got->rank_fit[0].group, want[0].group);
  EXPECT_EQ(got->rank_fit[0].vector.names, want[0].vector.names);
  EXPECT_EQ(got->rank_fit[0].vector.weights, want[0].vector.weights);
  EXPECT_EQ(got->rank_fit[0].vector.means, want[0].vector.means);
  EXPECT_EQ(got->rank_fit[0].samples, want[0].samples);
  EXPECT_EQ(got->rank_fit[0].pairs, want[0].pairs);
  Calibration c;
  apply_rank_fit(got->rank_fit, c);
  WorkloadShape s;
  s.kind = ClusterKind::gemm;
  EXPECT_GT(c.rank_log(h100, s, variant(64).key(), 10.0), c.rank_log(h100, s, variant(32).key(), 10.0))
      << "block_m 64 ran 1.5x block_m 32";
  const auto emulated_fit = client_farm.estimator_ratios("h100", true, "", /*rank_vectors=*/true);
  EXPECT_TRUE(emulated_fit->param_fit.empty() && emulated_fit->rank_fit.empty());  // emulated: none
}

// A tune's farm (the service's RemoteFarm) that notes whether each calibration request asked
// for the ranking vectors.
class AskingFarm : public Farm {
 public:
  explicit AskingFarm(Farm& farm) : farm_(farm) {}
  void submit(FarmJob job) override { farm_.submit(std::move(job)); }
  std::vector<Measurement> collect(std::chrono::milliseconds timeout) override { return farm_.collect(timeout); }
  FarmStatus status() const override { return farm_.status(); }
  void shutdown() override { farm_.shutdown(); }
  std::optional<Ratios> estimator_ratios(const std::string& gpu_type, bool emulated, const std::string& storage,
                                         bool rank_vectors) override {
    asked.push_back(rank_vectors);
    return farm_.estimator_ratios(gpu_type, emulated, storage, rank_vectors);
  }
  std::vector<bool> asked;  // rank_vectors, per request

 private:
  Farm& farm_;
};

// The calibrate stage of a `tune --farm` asks the service for the ranking vectors only where it
// applies them: a real tune with --rank-calibration (and per-parameter calibration, which it
// replaces). That tune gets the service's vector; the others get the per-parameter factors of
// real results and no vector.
TEST(FarmServiceRatios, ATuneAsksTheServiceForTheRankingVectorsOnlyWithRankCalibration) {
  auto service_db = make_memory_db();
  add_ranked_results(service_db.get());
  Service service(*service_db);
  RemoteFarm remote(client(service.endpoint(), "m", 1));
  const GpuCatalog catalog = GpuCatalog::builtin();
  const Calibration::ParamGroup gemm = {"h100", ClusterKind::gemm, MathUnit::fp32, ranked_variant(32).template_name};
  struct Case {
    const char* name;
    bool emulated, params, rank;
  };
  for (const Case& k : {Case{"real", false, true, false}, Case{"real --rank-calibration", false, true, true},
                        Case{"real --rank-calibration --no-param-calibration", false, false, true},
                        Case{"emulated --rank-calibration", true, true, true}}) {
    SCOPED_TRACE(k.name);
    TuneOptions o;
    o.gpus = {&catalog.require("h100")};
    o.emulated = k.emulated;
    o.calibration_params = k.params;
    o.calibration_rank = k.rank;
    std::vector<StageTime> stages;
    const tune_stage::StageLog log(o, stages);
    AskingFarm farm(remote);
    auto own_db = make_memory_db();  // as `tune --farm` has it: empty
    const tune_stage::Calibrated c =
        tune_stage::calibrate(*own_db, farm, o, log, enumerate_model_variants(Graph{}, o.gpus, o.plan.space));
    const bool applies = !k.emulated && k.params && k.rank;
    EXPECT_EQ(farm.asked, std::vector<bool>{applies});
    EXPECT_EQ(c.rank_fitted, applies ? 1 : 0);
    EXPECT_EQ(c.calibration.rank_vectors.count(gemm), applies ? 1u : 0u);
    // Real results' per-parameter factors, except where the template's vector replaces them.
    EXPECT_EQ(c.calibration.param_factors.count(gemm), !k.emulated && k.params && !applies ? 1u : 0u);
  }
}

TEST(FarmServiceRatios, AnInvalidRankingVectorIsAProtocolError) {
  FittedRankVector f;
  f.group = {"h100", ClusterKind::conv, MathUnit::tf32, "conv_implicit_gemm"};
  f.vector.names = {"lbk", "lest"};
  f.vector.weights = {0.5, 3.0};
  f.vector.means = {4.0, 2.5};
  f.samples = 40;
  f.workloads = 5;
  f.pairs = 70;
  farm::RatiosReply reply;
  to_proto(std::vector<FittedRankVector>{f}, &reply);
  const std::vector<FittedRankVector> back = rank_vectors_from_proto(reply, "h100");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].group, f.group);
  EXPECT_EQ(back[0].vector.names, f.vector.names);
  EXPECT_EQ(back[0].vector.weights, f.vector.weights);
  EXPECT_EQ(back[0].vector.means, f.vector.means);
  EXPECT_EQ(back[0].samples, 40);
  EXPECT_EQ(back[0].workloads, 5);
  EXPECT_EQ(back[0].pairs, 70);
  const auto invalid = refused_by(reply, [](const farm::RatiosReply& r) { return rank_vectors_from_proto(r, "h100"); });
  invalid([](farm::RatiosReply& r) { r.mutable_rank_vectors(0)->set_kind("convolution"); });
  invalid([](farm::RatiosReply& r) { r.mutable_rank_vectors(0)->set_unit(static_cast<farm::MathUnitCode>(7)); });
  invalid([](farm::RatiosReply& r) { r.mutable_rank_vectors(0)->set_template_name(""); });
  invalid([](farm::RatiosReply& r) { r.mutable_rank_vectors(0)->set_names(0, ""); });
  invalid([](farm::RatiosReply& r) { r.mutable_rank_vectors(0)->add_weights(1.0); });
  invalid([](farm::RatiosReply& r) { r.mutable_rank_vectors(0)->set_means(1, INFINITY); });
  invalid([](farm::RatiosReply& r) { r.mutable_rank_vectors(0)->set_weights(0, NAN); });
  invalid([](farm::RatiosReply& r) { *r.add_rank_vectors() = r.rank_vectors(0); });  // a template twice
  invalid([](farm::RatiosReply& r) {
    for (size_t i = 0; i < kMaxRankFeatures; ++i) {
      r.mutable_rank_vectors(0)->add_names("x");
      r.mutable_rank_vectors(0)->add_weights(0);
      r.mutable_rank_vectors(0)->add_means(0);
    }
  });
}

TEST(FarmServiceRatios, AnInvalidPerParameterFactorIsAProtocolError) {
  FittedParamFactor f;
  f.group = {"h100", ClusterKind::conv, MathUnit::tf32, "conv_implicit_gemm"};
  f.param = "block_k";
  f.value = 32;
  f.factor = 1.25;
  f.samples = 40;
  farm::RatiosReply reply;
  to_proto(std::vector<FittedParamFactor>{f}, &reply);
  const std::vector<FittedParamFactor> back = param_factors_from_proto(reply, "h100");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].group, f.group);
  EXPECT_EQ(back[0].param, "block_k");
  EXPECT_EQ(back[0].value, 32);
  EXPECT_DOUBLE_EQ(back[0].factor, 1.25);
  EXPECT_EQ(back[0].samples, 40);
  const auto invalid = refused_by(reply, [](const farm::RatiosReply& r) { return param_factors_from_proto(r, "h100"); });
  invalid([](farm::RatiosReply& r) { r.mutable_param_factors(0)->set_kind("convolution"); });
  invalid([](farm::RatiosReply& r) { r.mutable_param_factors(0)->set_unit(static_cast<farm::MathUnitCode>(7)); });
  invalid([](farm::RatiosReply& r) { r.mutable_param_factors(0)->set_template_name(""); });
  invalid([](farm::RatiosReply& r) { r.mutable_param_factors(0)->set_param(""); });
  invalid([](farm::RatiosReply& r) { r.mutable_param_factors(0)->set_factor(NAN); });
  invalid([](farm::RatiosReply& r) { r.mutable_param_factors(0)->set_factor(0); });
  invalid([](farm::RatiosReply& r) {
    for (size_t i = 0; i < kMaxParamFactors; ++i) *r.add_param_factors() = r.param_factors(0);
  });
}

TEST(FarmServiceRatios, AClientOfAnotherVersionIsRefusedWithTheReason) {
  auto db = db_with_ratios();
  Service service(*db);
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 5000);
  s.connect(service.endpoint());
  const auto answer = [&](const farm::Envelope& e) {
    s.send(zmq::buffer(farm::serialize(e)), zmq::send_flags::none);
    zmq::message_t m;
    EXPECT_TRUE(s.recv(m));
    std::string why;
    return farm::parse_envelope(m.data(), m.size(), farm::kDefaultMaxMessageBytes, &why).value_or(farm::Envelope());
  };
  farm::Envelope request = farm::make_envelope();
  request.mutable_ratios_request()->set_client_protocol_version(1);  // before the ratios
  request.mutable_ratios_request()->set_request_id(9);
  request.mutable_ratios_request()->set_gpu_type("h100");
  farm::Envelope r = answer(request);
  ASSERT_EQ(r.body_case(), farm::Envelope::kRefused);
  EXPECT_NE(r.refused().reason().find("client protocol version 1 is not supported (this service speaks 3)"),
            std::string::npos) << r.refused().reason();
  farm::Envelope hello = farm::make_envelope();
  hello.mutable_client_hello()->set_client_protocol_version(1);
  hello.mutable_client_hello()->add_gpu_types("h100");
  hello.mutable_client_hello()->set_priority(1);
  r = answer(hello);
  ASSERT_EQ(r.body_case(), farm::Envelope::kRefused);
  EXPECT_NE(r.refused().reason().find("client protocol version 1"), std::string::npos);
  // Version 2 (outcomes one per message): it would drop every OutcomeBatch and wait for ever.
  hello.mutable_client_hello()->set_client_protocol_version(2);
  r = answer(hello);
  ASSERT_EQ(r.body_case(), farm::Envelope::kRefused);
  EXPECT_NE(r.refused().reason().find("client protocol version 2 is not supported (this service speaks 3)"),
            std::string::npos) << r.refused().reason();
  EXPECT_FALSE(r.refused().unknown_client()) << "final: the client stops";
  // A client of an older transport (protocol_version 3, before jobs as bytes) is refused in
  // its own version: it drops envelopes of any other, and would wait for ever.
  farm::Envelope old_hello = hello;
  old_hello.set_protocol_version(3);
  old_hello.mutable_client_hello()->set_client_protocol_version(farm::kClientProtocolVersion);
  r = answer(old_hello);
  ASSERT_EQ(r.body_case(), farm::Envelope::kRefused);
  EXPECT_EQ(r.protocol_version(), 3u);
  EXPECT_NE(r.refused().reason().find("transport protocol version 3 is not supported (this service speaks 4)"),
            std::string::npos) << r.refused().reason();
  // The current version is answered, with the request's id.
  request.mutable_ratios_request()->set_client_protocol_version(farm::kClientProtocolVersion);
  r = answer(request);
  ASSERT_EQ(r.body_case(), farm::Envelope::kRatiosReply);
  EXPECT_EQ(r.ratios_reply().request_id(), 9u);
  EXPECT_EQ(r.ratios_reply().units_size(), 2);  // gemm and conv of real h100 results
}

std::string example(const std::string& name) { return testing::source_dir() + "/examples/" + name + "/model.onnx"; }

TuneOptions tune_options() {
  TuneOptions o;
  static const GpuCatalog catalog = GpuCatalog::builtin();
  o.gpus = {&catalog.require("h100")};
  o.emulated = true;
  o.check_winners = false;
  o.cross_check = false;
  o.measure_reference = false;
  o.seed_k = 0;
  o.plan.prune.top_k = 6;  // enough results per kind to fit a factor (8), a short tune
  o.worker_wait = std::chrono::milliseconds(5000);
  return o;
}

int moved_factors(const std::vector<FittedFactor>& fit) {
  int n = 0;
  for (const FittedFactor& f : fit) n += f.used && std::abs(f.factor - 1) > 0.01;
  return n;
}

TEST(FarmServiceRatios, ATuneThroughTheServiceFitsItsCalibrationFromTheServicesDb) {
  // An earlier tune of tiny_cnn recorded into what becomes the service's DB.
  auto service_db = make_memory_db();
  InProcessFarmOptions f;
  f.gpu_types = {"h100"};
  f.workers_per_type = 2;
  f.cache_dir = testing::shared_compile_cache();
  const TuneResult local = tune(example("tiny_cnn"), *make_inprocess_farm(f), *service_db, tune_options());
  const std::vector<FittedFactor> want =
      fit_calibration(service_db->estimator_ratios("h100", TimingSource::emulated, "f32"));
  ASSERT_GT(moved_factors(want), 0) << "the earlier tune fits no factor: the test would prove nothing";

  Service service(*service_db);
  Workers workers(service.endpoint(), 1, 1ms);
  for (const bool from_db : {true, false}) {
    SCOPED_TRACE(from_db ? "calibration from the DB" : "--no-db-calibration");
    TuneOptions o = tune_options();
    o.calibration_from_db = from_db;
    std::ostringstream console;
    o.console = &console;
    auto own_db = make_memory_db();  // as `tune --farm` has it: empty
    RemoteFarm farm(client(service.endpoint(), "tiny_cnn", 1));
    const TuneResult r = tune(example("tiny_cnn"), farm, *own_db, o);
    farm.shutdown();
    ASSERT_EQ(r.gpus.size(), 1u);
    const GpuTuneResult& g = r.gpus[0];
    if (!from_db) {
      EXPECT_TRUE(g.calibration_fit.empty());
      EXPECT_TRUE(r.calibration.factors.empty());
      EXPECT_EQ(console.str().find("calibration h100 from"), std::string::npos) << console.str();
      continue;
    }
    ASSERT_EQ(g.calibration_fit.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(g.calibration_fit[i].kind, want[i].kind);
      EXPECT_EQ(g.calibration_fit[i].unit, want[i].unit);
      EXPECT_EQ(g.calibration_fit[i].samples, want[i].samples);
      EXPECT_DOUBLE_EQ(g.calibration_fit[i].factor, want[i].factor);
    }
    for (const FittedFactor& w : want) {
      if (w.used && w.unit == MathUnit::fp32) {
        EXPECT_DOUBLE_EQ(r.calibration.factors.at({"h100", w.kind}), w.factor);
      }
    }
    // The stage's line, as a local tune prints it, says whose DB it was.
    int results = 0;
    for (const FittedFactor& w : want) results += w.samples;
    EXPECT_NE(console.str().find(fmt::format("calibration h100 from {} emulated DB results of f32 workloads", results)),
              std::string::npos) << console.str();
    EXPECT_NE(console.str().find("the DB is the farm service's"), std::string::npos);
    // The same estimates as the local tune that fitted the same factors would make.
    EXPECT_EQ(r.plan.workload_set.workloads.size(), local.plan.workload_set.workloads.size());
  }
}

}  // namespace
}  // namespace dc
