#include "measure_child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "farm/status.h"
#include "ir/error.h"

namespace dc {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMaxChildFrame = 256u << 20;

bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool write_message(int fd, const farm::ChildMessage& m) {
  std::string payload;
  if (!m.SerializeToString(&payload)) return false;
  const uint32_t n = static_cast<uint32_t>(payload.size());
  const char len[4] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                       static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 24) & 0xff)};
  return write_all(fd, len, 4) && write_all(fd, payload.data(), payload.size());
}

// Frames out of a byte stream.
class FrameReader {
 public:
  // Reads what is available (one recv). false on EOF or error.
  bool fill(int fd) {
    char chunk[65536];
    ssize_t n;
    do n = ::recv(fd, chunk, sizeof chunk, 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }
  // The next complete message; nullopt if incomplete. *broken on a bad frame.
  std::optional<farm::ChildMessage> next(bool* broken) {
    if (buffer_.size() < 4) return std::nullopt;
    const auto* b = reinterpret_cast<const unsigned char*>(buffer_.data());
    const uint32_t n = b[0] | (uint32_t{b[1]} << 8) | (uint32_t{b[2]} << 16) | (uint32_t{b[3]} << 24);
    if (n > kMaxChildFrame) {
      *broken = true;
      return std::nullopt;
    }
    if (buffer_.size() < 4 + size_t{n}) return std::nullopt;
    farm::ChildMessage m;
    if (!m.ParseFromArray(buffer_.data() + 4, static_cast<int>(n))) *broken = true;
    buffer_.erase(0, 4 + size_t{n});
    if (*broken) return std::nullopt;
    return m;
  }

 private:
  std::string buffer_;
};

std::string describe_status(int status) {
  if (WIFSIGNALED(status))
    return str_cat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  if (WIFEXITED(status)) return str_cat("exited with status ", WEXITSTATUS(status));
  return "ended";
}

}  // namespace

MeasureChild::MeasureChild(std::vector<std::string> argv) : argv_(std::move(argv)) {
  DC_INTERNAL_CHECK(!argv_.empty(), "measurement child without a command");
}

MeasureChild::~MeasureChild() { stop(); }

void MeasureChild::start() {
  int sv[2];
  DC_USER_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0,
                "socketpair failed: ", std::strerror(errno));
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<char*> args;
  for (std::string& a : argv_) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(sv[0]);
    ::close(sv[1]);
    throw_user_error("fork failed: ", std::strerror(errno));
  }
  if (pid == 0) {
    // Dies with the thread that started it, even on SIGKILL of the worker; out of the
    // terminal's process group, so that Ctrl-C reaches the worker (which finishes the job)
    // and not the child in the middle of it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);
    ::setpgid(0, 0);
    if (sv[1] == 3) ::fcntl(3, F_SETFD, 0);
    else if (::dup2(sv[1], 3) < 0) ::_exit(125);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(sv[1]);
  fd_ = sv[0];
  pid_ = pid;
  ++starts_;
}

std::string MeasureChild::reap() {
  if (pid_ <= 0) return "not running";
  int status = 0;
  // It closed its socket: give it a moment to exit by itself, then make sure.
  for (int i = 0; i < 100; ++i) {
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || r < 0) {
      pid_ = 0;
      if (fd_ >= 0) ::close(fd_);
      fd_ = -1;
      return r < 0 ? "lost" : describe_status(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  pid_ = 0;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  return "hung after closing its socket (killed)";
}

void MeasureChild::stop() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = 0;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

farm::Result MeasureChild::run(const farm::Job& job) {
  auto fail = [&job](JobStatus s, const std::string& error) {
    farm::Result r;
    r.set_lease_id(job.lease_id());
    r.set_job_id(job.job_id());
    r.set_device_index(job.device_index());
    r.set_status(std::string(job_status_name(s)));
    r.set_error(error);
    return r;
  };
  farm::ChildMessage down;
  *down.mutable_job() = job;
  bool sent = false;
  for (int attempt = 0; attempt < 2 && !sent; ++attempt) {
    if (pid_ > 0) {
      // A child that exited since the last job (or never came up) is replaced.
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        spdlog::warn("measurement child {} {}; starting a new one", pid_.load(), describe_status(status));
        pid_ = 0;
        ::close(fd_);
        fd_ = -1;
      }
    }
    try {
      if (pid_ == 0) start();
    } catch (const std::exception& e) {
      return fail(JobStatus::internal_error, std::string("cannot start the measurement child: ") + e.what());
    }
    sent = write_message(fd_, down);
    if (!sent) stop();
  }
  if (!sent) return fail(JobStatus::internal_error, "cannot hand the job to a measurement child");

  FrameReader reader;
  bool compiling = true;
  Clock::time_point run_started;
  auto deadline = Clock::now() + std::chrono::milliseconds(job.compile_deadline_ms());
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      const pid_t was = pid_;
      stop();
      spdlog::warn("job {}: {} deadline passed; measurement child {} killed", job.job_id(),
                   compiling ? "compile" : "run", was);
      return fail(JobStatus::timeout,
                  str_cat(compiling ? "compile" : "run", " exceeded its deadline of ",
                          compiling ? job.compile_deadline_ms() : job.run_deadline_ms(),
                          " ms; the measurement child was killed and is restarted"));
    }
    pollfd p{fd_, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) {
      stop();
      return fail(JobStatus::internal_error, std::string("poll failed: ") + std::strerror(errno));
    }
    if (n <= 0) continue;
    if (!reader.fill(fd_)) {
      const std::string how = reap();
      spdlog::warn("job {}: measurement child {}", job.job_id(), how);
      return fail(JobStatus::runtime_fault, str_cat("the measurement child ", how, " during the ",
                                                    compiling ? "compile" : "run", " phase"));
    }
    bool broken = false;
    while (std::optional<farm::ChildMessage> m = reader.next(&broken)) {
      if (m->has_compiled()) {
        compiling = false;
        run_started = Clock::now();
        deadline = run_started + std::chrono::milliseconds(job.run_deadline_ms());
      } else if (m->has_result()) {
        farm::Result r = m->result();
        r.set_run_seconds(compiling ? 0.0 : std::chrono::duration<double>(Clock::now() - run_started).count());
        r.set_lease_id(job.lease_id());
        r.set_job_id(job.job_id());
        r.set_device_index(job.device_index());
        if (m->exiting()) reap();
        return r;
      }
    }
    if (broken) {
      stop();
      return fail(JobStatus::internal_error, "the measurement child sent a malformed message (killed)");
    }
  }
}

int serve_measure_child(int fd, const ChildExecute& execute, const std::function<bool()>& must_exit) {
  FrameReader reader;
  while (true) {
    bool broken = false;
    std::optional<farm::ChildMessage> m = reader.next(&broken);
    if (broken) return 2;
    if (!m) {
      if (!reader.fill(fd)) return 0;  // the parent closed: done
      continue;
    }
    if (!m->has_job()) continue;
    farm::ChildMessage compiled;
    compiled.set_compiled(true);
    bool compiled_sent = false;
    farm::ChildMessage up;
    *up.mutable_result() = execute(m->job(), [&] {
      if (!compiled_sent) write_message(fd, compiled);
      compiled_sent = true;
    });
    const bool exiting = must_exit && must_exit();
    up.set_exiting(exiting);
    if (!write_message(fd, up)) return 2;
    if (exiting) return 0;
  }
}

}  // namespace dc
