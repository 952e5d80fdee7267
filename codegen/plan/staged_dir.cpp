#include "staged_dir.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc 2.28)
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "ir/error.h"

namespace dc {

namespace fs = std::filesystem;

namespace {

// fsync of a file or folder: the data before the rename that publishes it.
void sync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // nothing to sync is not worth failing the write over
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  DC_USER_CHECK(rc == 0, "cannot write '", p.string(), "': ", std::strerror(err), " (disk full?)");
}

// The folder the user named, with a symlink at the target followed (the link stays).
fs::path resolve_target(const std::string& target) {
  fs::path t = fs::absolute(fs::path(target)).lexically_normal();
  if (!t.has_filename()) t = t.parent_path();  // "out/" names the folder "out"
  std::error_code ec;
  if (fs::symlink_status(t, ec).type() != fs::file_type::symlink) return t;  // a folder, or none yet
  t = fs::canonical(t, ec);
  DC_USER_CHECK(!ec, "cannot resolve '", target, "': ", ec.message());
  return t;
}

}  // namespace

StagedDir::StagedDir(const std::string& target, std::span<const std::string_view> replaceable)
    : target_(resolve_target(target)) {
  std::error_code ec;
  if (fs::exists(target_, ec)) {
    DC_USER_CHECK(fs::is_directory(target_, ec), "'", target, "' exists and is not a folder");
    for (const auto& e : fs::directory_iterator(target_, ec)) {
      const std::string name = e.path().filename().string();
      DC_USER_CHECK(std::find(replaceable.begin(), replaceable.end(), name) != replaceable.end(), "'", target,
                    "' holds '", name, "', which is not a file of a plan: write the plan to a new or "
                    "empty folder, or over an earlier plan");
    }
    DC_USER_CHECK(!ec, "cannot list '", target, "': ", ec.message());
  }
  fs::create_directories(target_.parent_path(), ec);
  DC_USER_CHECK(!ec, "cannot create the folder of '", target, "': ", ec.message());
  staging_ = target_.parent_path() / fmt::format(".{}.staging-{}", target_.filename().string(), ::getpid());
  fs::remove_all(staging_, ec);  // left by an earlier process with this pid
  fs::create_directory(staging_, ec);
  DC_USER_CHECK(!ec, "cannot create '", staging_.string(), "': ", ec.message());
}

StagedDir::~StagedDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

void StagedDir::commit() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(staging_, ec)) sync_path(e.path());
  sync_path(staging_);
  if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_NOREPLACE) == 0) {
    committed_ = true;
  } else if (errno == EEXIST) {
    // An earlier folder: swap them in one step, then remove the earlier one (now at staging_).
    DC_USER_CHECK(::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) == 0,
                  "cannot replace '", target_.string(), "' by '", staging_.string(), "': ", std::strerror(errno));
    committed_ = true;
    fs::remove_all(staging_, ec);
  } else if (errno == EINVAL || errno == ENOSYS) {
    // A filesystem without renameat2's flags: rename(2) replaces an empty target only.
    fs::remove(target_, ec);
    fs::rename(staging_, target_, ec);
    DC_USER_CHECK(!ec, "cannot rename '", staging_.string(), "' to '", target_.string(), "': ", ec.message());
    committed_ = true;
  } else {
    throw_user_error("cannot rename '", staging_.string(), "' to '", target_.string(), "': ", std::strerror(errno));
  }
  sync_path(target_.parent_path());
}

}  // namespace dc
