// The farm service's weighted fair share (coordinator/service/fair_share.h).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "fair_share.h"

namespace dc {
namespace {

const auto kAll = [](uint64_t) { return true; };

TEST(FairShare, BackloggedTunesAreServedInProportionToTheirWeights) {
  FairShare fs;
  fs.add_tune(1, 1);
  fs.add_tune(2, 2);
  fs.add_tune(3, 3);
  for (uint64_t i = 0; i < 1000; ++i)
    for (uint64_t t = 1; t <= 3; ++t) fs.push("h100", t, t * 10000 + i);
  std::map<uint64_t, int> served;
  for (int i = 0; i < 600; ++i) ++served[fs.pick("h100", kAll)->tune];
  EXPECT_NEAR(served[1], 100, 1);
  EXPECT_NEAR(served[2], 200, 1);
  EXPECT_NEAR(served[3], 300, 1);
}

TEST(FairShare, ATuneOfWeightOneIsNotStarvedByAHeavyOne) {
  FairShare fs;
  fs.add_tune(1, 100);
  fs.add_tune(2, 1);
  for (uint64_t i = 0; i < 1000; ++i) fs.push("a100", 1, i);
  fs.push("a100", 2, 5000);
  int picks = 0;
  while (true) {
    const auto p = fs.pick("a100", kAll);
    ++picks;
    if (p->tune == 2) break;
  }
  EXPECT_LE(picks, 102);  // within (100 + 1) / 1 picks
}

TEST(FairShare, ALateTuneJoinsAtTheCurrentVirtualTimeWithoutABurst) {
  FairShare fs;
  fs.add_tune(1, 1);
  fs.add_tune(2, 1);
  for (uint64_t i = 0; i < 100; ++i) fs.push("h100", 1, i);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(fs.pick("h100", kAll)->tune, 1u);
  for (uint64_t i = 0; i < 100; ++i) fs.push("h100", 2, 1000 + i);
  std::map<uint64_t, int> served;
  for (int i = 0; i < 20; ++i) ++served[fs.pick("h100", kAll)->tune];
  // Alternating from now on, not 50 in a row for the newcomer.
  EXPECT_EQ(served[1], 10);
  EXPECT_EQ(served[2], 10);
}

TEST(FairShare, DeadItemsAreSkippedWithoutCharge) {
  FairShare fs;
  fs.add_tune(1, 1);
  fs.add_tune(2, 1);
  // Tune 2 also queued the items tune 1 has (a shared job): once served, they are dead.
  std::set<uint64_t> done;
  for (uint64_t i = 0; i < 10; ++i) {
    fs.push("h100", 1, i);
    fs.push("h100", 2, i);
  }
  const auto live = [&](uint64_t item) { return !done.count(item); };
  std::map<uint64_t, int> served;
  for (int n = 0; n < 10; ++n) {
    const auto p = fs.pick("h100", live);
    ASSERT_TRUE(p);
    EXPECT_TRUE(done.insert(p->item).second) << "item " << p->item << " served twice";
    ++served[p->tune];
  }
  EXPECT_FALSE(fs.pick("h100", live));
  EXPECT_EQ(served[1], 5);
  EXPECT_EQ(served[2], 5);
}

TEST(FairShare, RemovedTunesAndOtherTypesAreNotServed) {
  FairShare fs;
  fs.add_tune(1, 1);
  fs.add_tune(2, 1);
  fs.push("h100", 1, 1);
  fs.push("a100", 2, 2);
  fs.remove_tune(1);
  EXPECT_FALSE(fs.pick("h100", kAll));
  EXPECT_EQ(fs.queued("a100"), 1u);
  EXPECT_EQ(fs.pick("a100", kAll)->item, 2u);
}

}  // namespace
}  // namespace dc
