// A folder written whole or not at all (plan folders: docs/plan-format.md, "Atomic write").
// The files go into a hidden staging folder beside the target (same filesystem), and
// commit() puts it in place with one rename: renameat2(RENAME_EXCHANGE) over an earlier
// folder, then the earlier one is removed. A write that fails (disk full) or a process that
// dies before commit() therefore leaves the target as it was: absent, or the earlier plan,
// never a folder that looks complete but is not. The destructor removes an uncommitted
// staging folder (a SIGKILLed process leaves its `.NAME.staging-PID` behind, never the
// target half-written).
#pragma once

#include <array>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace dc {

class StagedDir {
 public:
  // `target`: the folder to write (its parent is created). `replaceable`: the names an
  // earlier folder at `target` may hold for it to be replaced; a folder holding anything
  // else is refused up front (UserError), so that no user file is ever removed.
  StagedDir(const std::string& target, std::span<const std::string_view> replaceable);
  ~StagedDir();
  StagedDir(const StagedDir&) = delete;
  StagedDir& operator=(const StagedDir&) = delete;

  // Where to write the files before commit().
  const std::filesystem::path& path() const { return staging_; }
  // Syncs the staged files and renames the folder into place (UserError if it cannot).
  void commit();

 private:
  std::filesystem::path target_;
  std::filesystem::path staging_;
  bool committed_ = false;
};

// The names of a plan folder's files (plan_io.h), and with tune's summary.txt and
// selection.json: what a plan folder written earlier may hold.
inline constexpr std::array<std::string_view, 5> kPlanFolderFiles = {
    "plan.json", "kernels.cu", "weights.bin", "summary.txt", "selection.json"};

}  // namespace dc
