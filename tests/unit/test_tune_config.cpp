// The tuning configuration file: keys change only what they name; bad files are refused.
#include <gtest/gtest.h>

#include <map>

#include "ir/error.h"
#include "tune_config.h"

namespace dc {
namespace {

TEST(TuneConfig, KeysSetPruningPrecisionsAndCalibration) {
  PlanOptions o;
  parse_tune_config("prune: {within: 2.5, top_k: 7}\nprecision: fp16\n"
                    "calibration:\n  h100: {conv: 1.25, attention: 0.5}\n",
                    "t.yaml", &o);
  EXPECT_DOUBLE_EQ(o.prune.within_factor, 2.5);
  EXPECT_EQ(o.prune.top_k, 7);
  EXPECT_EQ(o.precision, Precision::fp16);
  EXPECT_EQ(o.space.precisions, (std::vector<std::string>{"fp16", "fp32"}));
  EXPECT_DOUBLE_EQ(o.calibration.factor("h100", ClusterKind::conv), 1.25);
  EXPECT_DOUBLE_EQ(o.calibration.factor("h100", ClusterKind::attention), 0.5);
  EXPECT_DOUBLE_EQ(o.calibration.factor("h100", ClusterKind::gemm), 1.0);
  EXPECT_DOUBLE_EQ(o.calibration.factor("a100", ClusterKind::conv), 1.0);
}

TEST(TuneConfig, AbsentKeysKeepDefaults) {
  PlanOptions o;
  parse_tune_config("prune: {top_k: 4}\n", "t.yaml", &o);
  EXPECT_DOUBLE_EQ(o.prune.within_factor, 1.5);
  EXPECT_EQ(o.prune.top_k, 4);
  EXPECT_EQ(o.precision, Precision::fp32);
  EXPECT_EQ(o.space.precisions, (std::vector<std::string>{"fp32"}));
  parse_tune_config("", "empty.yaml", &o);
  EXPECT_EQ(o.prune.top_k, 4);
}

TEST(TuneConfig, BadFilesAreUserErrors) {
  for (const char* text : {"prune: {witin: 2}", "prune: {within: 0.5}", "prune: {top_k: 0}",
                           "prune: {top_k: many}", "precisions: [fp8]", "precisions: []",
                           "precisions: [fp32, fp16]", "precision: fp8", "precision: [fp16]",
                           "precision: fp16\nprecisions: [fp16]",
                           "calibration: {h100: {convolution: 1}}", "calibration: {h100: {conv: -1}}",
                           "speed: fast", "prune: [1, 2", "calibration: 3"}) {
    PlanOptions o;
    EXPECT_THROW(parse_tune_config(text, "bad.yaml", &o), UserError) << text;
  }
  PlanOptions o;
  EXPECT_THROW(load_tune_config("/nonexistent/tune.yaml", &o), UserError);
}

// The math paths a plan enumerates follow from its precision (CONTRACT "Graph-level dtypes").
TEST(TuneConfig, PrecisionSetsItsMathPaths) {
  const std::map<Precision, std::vector<std::string>> want = {
      {Precision::fp32, {"fp32"}}, {Precision::tf32, {"tf32", "fp32"}},
      {Precision::fp16, {"fp16", "fp32"}}, {Precision::bf16, {"bf16", "fp32"}}};
  for (const auto& [p, paths] : want) {
    PlanOptions o;
    set_plan_precision(&o, p);
    EXPECT_EQ(o.precision, p);
    EXPECT_EQ(o.space.precisions, paths) << precision_name(p);
  }
}

// The deprecated list form: one name is that precision, anything else an error naming
// --precision.
TEST(TuneConfig, DeprecatedPrecisionsList) {
  EXPECT_EQ(precision_from_deprecated_list({"fp16"}, "--precisions"), Precision::fp16);
  PlanOptions o;
  parse_tune_config("precisions: [bf16]\n", "old.yaml", &o);
  EXPECT_EQ(o.precision, Precision::bf16);
  EXPECT_EQ(o.space.precisions, (std::vector<std::string>{"bf16", "fp32"}));
  try {
    precision_from_deprecated_list({"fp32", "fp16"}, "--precisions");
    ADD_FAILURE() << "two precisions accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--precision fp32|tf32|fp16|bf16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(precision_from_deprecated_list({"fp32", ""}, "--precisions"), UserError);
  EXPECT_THROW(precision_from_deprecated_list({"half"}, "--precisions"), UserError);
}

TEST(TuneConfig, ShippedExampleLoads) {
  PlanOptions o;
  load_tune_config(std::string(DC_SOURCE_DIR) + "/examples/tune.yaml", &o);
  EXPECT_DOUBLE_EQ(o.prune.within_factor, 1.5);
  EXPECT_EQ(o.prune.top_k, 32);
}

}  // namespace
}  // namespace dc
