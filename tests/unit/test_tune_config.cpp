// The tuning configuration file: keys change only what they name; bad files are refused.
#include <gtest/gtest.h>

#include "ir/error.h"
#include "tune_config.h"

namespace dc {
namespace {

TEST(TuneConfig, KeysSetPruningPrecisionsAndCalibration) {
  PlanOptions o;
  parse_tune_config("prune: {within: 2.5, top_k: 7}\nprecisions: [fp32, fp16]\n"
                    "calibration:\n  h100: {conv: 1.25, attention: 0.5}\n",
                    "t.yaml", &o);
  EXPECT_DOUBLE_EQ(o.prune.within_factor, 2.5);
  EXPECT_EQ(o.prune.top_k, 7);
  EXPECT_EQ(o.space.precisions, (std::vector<std::string>{"fp32", "fp16"}));
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
  EXPECT_EQ(o.space.precisions, (std::vector<std::string>{"fp32"}));
  parse_tune_config("", "empty.yaml", &o);
  EXPECT_EQ(o.prune.top_k, 4);
}

TEST(TuneConfig, BadFilesAreUserErrors) {
  for (const char* text : {"prune: {witin: 2}", "prune: {within: 0.5}", "prune: {top_k: 0}",
                           "prune: {top_k: many}", "precisions: [fp8]", "precisions: []",
                           "calibration: {h100: {convolution: 1}}", "calibration: {h100: {conv: -1}}",
                           "speed: fast", "prune: [1, 2", "calibration: 3"}) {
    PlanOptions o;
    EXPECT_THROW(parse_tune_config(text, "bad.yaml", &o), UserError) << text;
  }
  PlanOptions o;
  EXPECT_THROW(load_tune_config("/nonexistent/tune.yaml", &o), UserError);
  EXPECT_EQ(parse_precisions("fp32,bf16"), (std::vector<std::string>{"fp32", "bf16"}));
  EXPECT_THROW(parse_precisions("fp32,,fp16"), UserError);
}

TEST(TuneConfig, ShippedExampleLoads) {
  PlanOptions o;
  load_tune_config(std::string(DC_SOURCE_DIR) + "/examples/tune.yaml", &o);
  EXPECT_DOUBLE_EQ(o.prune.within_factor, 1.5);
  EXPECT_EQ(o.prune.top_k, 32);
}

}  // namespace
}  // namespace dc
