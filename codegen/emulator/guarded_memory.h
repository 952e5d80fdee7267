// Memory for emulated kernels that turns stray accesses into faults: every buffer ends at an
// inaccessible page, fiber stacks sit above one, and inputs can be made read-only. FaultTrap
// then turns the fault (SIGSEGV, SIGBUS, SIGFPE) raised on the emulating thread into an
// ordinary return, so a kernel bug becomes an error message instead of a crash.
#pragma once

#include <csetjmp>
#include <csignal>
#include <cstddef>
#include <string>

namespace dc::emu {

// `bytes` of data placed so that it ends (after rounding up to 16 bytes) at an inaccessible
// page; another one sits before the data's first page. Slack bytes are filled with 0xff.
class GuardedRegion {
 public:
  GuardedRegion() = default;
  explicit GuardedRegion(size_t bytes);
  ~GuardedRegion();
  GuardedRegion(GuardedRegion&& other) noexcept;
  GuardedRegion& operator=(GuardedRegion&& other) noexcept;
  GuardedRegion(const GuardedRegion&) = delete;
  GuardedRegion& operator=(const GuardedRegion&) = delete;

  unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  void set_read_only(bool read_only);

  // Where `addr` lies: nowhere near this region, in the guard page (or slack) before the
  // data, inside the data, or past its end. `offset` is addr - data() for before/inside/after.
  enum class Where { outside, before, inside, after };
  Where locate(const void* addr, ptrdiff_t* offset) const;

 private:
  void release();
  unsigned char* base_ = nullptr;  // the mapping, guard pages included
  size_t mapped_ = 0;
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
  size_t room_ = 0;  // accessible bytes between the guard pages
};

// `count` fiber stacks of `bytes` each, every one above its own inaccessible page.
class FiberStacks {
 public:
  FiberStacks(int count, size_t bytes);
  ~FiberStacks();
  FiberStacks(const FiberStacks&) = delete;
  FiberStacks& operator=(const FiberStacks&) = delete;

  unsigned char* stack(int i) const { return base_ + static_cast<size_t>(i) * stride_ + page_; }
  size_t bytes() const { return bytes_; }
  int count() const { return count_; }
  // True if addr lies in one of the guard pages (a fiber's stack overflowed).
  bool in_guard(const void* addr) const;

 private:
  unsigned char* base_ = nullptr;
  size_t page_ = 0, bytes_ = 0, stride_ = 0, mapped_ = 0;
  int count_ = 0;
};

struct FaultInfo {
  int signo = 0;
  int code = 0;                 // siginfo_t::si_code
  const void* addr = nullptr;   // siginfo_t::si_addr
};

// While alive, SIGSEGV, SIGBUS and SIGFPE raised inside run_trapping_faults on this thread
// return from it; other threads' faults go to the handlers that were installed before (the
// handlers are process-wide and reference-counted, the alternate signal stack is this
// thread's).
class FaultTrap {
 public:
  FaultTrap();
  ~FaultTrap();
  FaultTrap(const FaultTrap&) = delete;
  FaultTrap& operator=(const FaultTrap&) = delete;

 private:
  void* alt_stack_ = nullptr;
  size_t alt_stack_bytes_ = 0;
  stack_t previous_alt_stack_{};
};

// Runs body(arg); returns false with `fault` filled if it faulted (its frames are abandoned:
// body must hold no resources that need releasing). Needs a live FaultTrap on this thread.
bool run_trapping_faults(void (*body)(void*), void* arg, FaultInfo& fault);

// "SIGSEGV", "SIGFPE (integer division by zero)", ...
std::string signal_description(const FaultInfo& fault);

}  // namespace dc::emu
