// A folder written whole or not at all (codegen/plan/staged_dir.h): what plan --out and
// tune --out rely on so that a failed write (disk full: tests/cli/check_db_faults.py
// plan_full) leaves no folder that looks complete.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "ir/error.h"
#include "plan/staged_dir.h"
#include "tuning_db_testing.h"

namespace dc {
namespace {

namespace fs = std::filesystem;

void spit(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
fs::path root(const testing::TempDir& d) { return fs::path(d.file("x")).parent_path(); }
int entries(const fs::path& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(StagedDir, NothingAtTheTargetUntilCommit) {
  testing::TempDir dir;
  const fs::path target = root(dir) / "out" / "h100";
  {
    StagedDir staged(target.string(), kPlanFolderFiles);
    EXPECT_EQ(staged.path().parent_path(), target.parent_path()) << "beside the target: one filesystem";
    spit(staged.path() / "plan.json", "{}");
    EXPECT_FALSE(fs::exists(target));
    staged.commit();
  }
  EXPECT_EQ(slurp(target / "plan.json"), "{}");
  EXPECT_EQ(entries(target.parent_path()), 1) << "no staging folder left";
}

TEST(StagedDir, AFailedWriteLeavesNothingOrTheEarlierFolder) {
  testing::TempDir dir;
  const fs::path target = root(dir) / "plan";
  auto failed_write = [&] {
    StagedDir staged(target.string() + "/", kPlanFolderFiles);  // a trailing slash names the same folder
    spit(staged.path() / "weights.bin", "half");
    throw std::runtime_error("disk full");
  };
  EXPECT_THROW(failed_write(), std::runtime_error);
  EXPECT_FALSE(fs::exists(target));
  EXPECT_EQ(entries(root(dir)), 0) << "the staging folder is removed";

  fs::create_directory(target);
  spit(target / "plan.json", "old");
  spit(target / "summary.txt", "old summary");
  EXPECT_THROW(failed_write(), std::runtime_error);
  EXPECT_EQ(slurp(target / "plan.json"), "old");
  EXPECT_EQ(entries(target), 2);
  EXPECT_EQ(entries(root(dir)), 1);
}

TEST(StagedDir, ACommitReplacesTheEarlierFolderWhole) {
  testing::TempDir dir;
  const fs::path target = root(dir) / "plan";
  fs::create_directory(target);
  spit(target / "plan.json", "old");
  spit(target / "selection.json", "stale");
  {
    StagedDir staged(target.string(), kPlanFolderFiles);
    spit(staged.path() / "plan.json", "new");
    staged.commit();
  }
  EXPECT_EQ(slurp(target / "plan.json"), "new");
  EXPECT_FALSE(fs::exists(target / "selection.json")) << "nothing of the earlier folder is mixed in";
  EXPECT_EQ(entries(root(dir)), 1) << "the earlier folder is removed";
}

TEST(StagedDir, AFolderWithOtherFilesIsRefusedUpFront) {
  testing::TempDir dir;
  const fs::path target = root(dir) / "mine";
  fs::create_directory(target);
  spit(target / "notes.txt", "the user's");
  try {
    StagedDir staged(target.string(), kPlanFolderFiles);
    FAIL() << "a folder holding a user's file was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("holds 'notes.txt', which is not a file of a plan"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(slurp(target / "notes.txt"), "the user's");
  EXPECT_EQ(entries(root(dir)), 1);
  spit(root(dir) / "a_file", "x");
  EXPECT_THROW(StagedDir((root(dir) / "a_file").string(), kPlanFolderFiles), UserError);
}

}  // namespace
}  // namespace dc
