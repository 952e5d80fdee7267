// An eventfd that a ZeroMQ poll loop polls beside its sockets, so that other threads can
// wake it (new jobs, replies to send, shutdown). Used by the broker and the service client.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include "ir/error.h"

namespace dc {

class WakeFd {
 public:
  WakeFd() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) { DC_USER_CHECK(fd_ >= 0, "eventfd failed"); }
  ~WakeFd() { ::close(fd_); }
  WakeFd(const WakeFd&) = delete;
  WakeFd& operator=(const WakeFd&) = delete;
  int fd() const { return fd_; }
  void wake() const {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(fd_, &one, sizeof one);
  }
  void drain() const {
    uint64_t v = 0;
    [[maybe_unused]] const ssize_t n = ::read(fd_, &v, sizeof v);
  }

 private:
  int fd_;
};

}  // namespace dc
