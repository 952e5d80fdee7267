#include "emulator/guarded_memory.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>

#include "emulator/fiber.h"
#include "ir/error.h"

#ifdef DC_EMU_ASAN_FIBERS
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef DC_EMU_TSAN_FIBERS
#include <sanitizer/tsan_interface.h>
#endif

namespace dc::emu {

namespace {

size_t page_size() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

unsigned char* map_or_throw(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) throw_user_error("emulator: cannot map ", bytes, " bytes: ", std::strerror(errno));
  return static_cast<unsigned char*>(p);
}

// ASan keeps a mapping's shadow after munmap: a fiber stack left with the redzones of frames
// that never returned would poison whatever is mapped there next.
void unmap(void* p, size_t bytes) {
#ifdef DC_EMU_ASAN_FIBERS
  ASAN_UNPOISON_MEMORY_REGION(p, bytes);
#endif
  munmap(p, bytes);
}

void protect_or_throw(void* p, size_t bytes, int prot) {
  DC_INTERNAL_CHECK(mprotect(p, bytes, prot) == 0, "mprotect failed: ", std::strerror(errno));
}

// ---- signal handling ---------------------------------------------------------------------

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE};
constexpr int kNumSignals = 3;

struct Landing {
  sigjmp_buf env;
  FaultInfo info;
  // The jump leaves a fiber for the thread's own stack: sanitized builds say so first.
  void* tsan_fiber = nullptr;
  void* stack_lo = nullptr;
  size_t stack_size = 0;
  void* fake_stack = nullptr;  // ASan's, with detect_stack_use_after_return
};

// Records where the landing is (TSan's fiber, the thread's stack for ASan).
void note_landing_stack(Landing& landing) {
#ifdef DC_EMU_TSAN_FIBERS
  landing.tsan_fiber = __tsan_get_current_fiber();
#endif
#ifdef DC_EMU_ASAN_FIBERS
  landing.fake_stack = __asan_get_current_fake_stack();
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &landing.stack_lo, &landing.stack_size);
    pthread_attr_destroy(&attr);
  }
#endif
  (void)landing;
}

// Called in the handler just before the jump: the faulting fiber is never resumed.
void leave_fiber_for_landing(const Landing& landing) {
#ifdef DC_EMU_TSAN_FIBERS
  __tsan_switch_to_fiber(landing.tsan_fiber, 0);
#endif
#ifdef DC_EMU_ASAN_FIBERS
  // A null save ends the faulting fiber's fake stack, unless the fault is on the landing's.
  void* same_stack = nullptr;
  const bool on_landing = __asan_get_current_fake_stack() == landing.fake_stack;
  __sanitizer_start_switch_fiber(on_landing ? &same_stack : nullptr, landing.stack_lo, landing.stack_size);
#endif
  (void)landing;
}

// Called where the jump lands.
void arrive_at_landing(const Landing& landing) {
#ifdef DC_EMU_ASAN_FIBERS
  __sanitizer_finish_switch_fiber(landing.fake_stack, nullptr, nullptr);
#endif
  (void)landing;
}

thread_local Landing* t_landing = nullptr;

std::mutex g_install_mutex;
int g_install_count = 0;
struct sigaction g_previous[kNumSignals];

int signal_slot(int signo) {
  for (int i = 0; i < kNumSignals; ++i)
    if (kSignals[i] == signo) return i;
  return 0;
}

void on_fault(int signo, siginfo_t* info, void* uctx) {
  if (Landing* landing = t_landing) {
    t_landing = nullptr;
    landing->info.signo = signo;
    landing->info.code = info->si_code;
    landing->info.addr = info->si_addr;
    leave_fiber_for_landing(*landing);
    siglongjmp(landing->env, 1);
  }
  // Not an emulated kernel: hand the signal to whoever had it before.
  const struct sigaction& prev = g_previous[signal_slot(signo)];
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(signo, info, uctx);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(signo);
  } else {
    signal(signo, SIG_DFL);  // the default action (a core dump) once the handler returns
    raise(signo);
  }
}

void install_handlers() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_install_count++ > 0) return;
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_sigaction = &on_fault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < kNumSignals; ++i) sigaction(kSignals[i], &action, &g_previous[i]);
}

void uninstall_handlers() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (--g_install_count > 0) return;
  for (int i = 0; i < kNumSignals; ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
}

}  // namespace

// ---- GuardedRegion --------------------------------------------------------------------------

GuardedRegion::GuardedRegion(size_t bytes) {
  const size_t page = page_size();
  const size_t padded = round_up(bytes == 0 ? 1 : bytes, 16);
  room_ = round_up(padded, page);
  mapped_ = room_ + 2 * page;
  base_ = map_or_throw(mapped_);
  protect_or_throw(base_, page, PROT_NONE);
  protect_or_throw(base_ + page + room_, page, PROT_NONE);
  size_ = bytes;
  data_ = base_ + page + room_ - padded;
  std::memset(base_ + page, 0xff, room_);
}

GuardedRegion::~GuardedRegion() { release(); }

GuardedRegion::GuardedRegion(GuardedRegion&& other) noexcept { *this = std::move(other); }

GuardedRegion& GuardedRegion::operator=(GuardedRegion&& other) noexcept {
  if (this != &other) {
    release();
    base_ = std::exchange(other.base_, nullptr);
    mapped_ = std::exchange(other.mapped_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    room_ = std::exchange(other.room_, 0);
  }
  return *this;
}

void GuardedRegion::release() {
  if (base_ != nullptr) unmap(base_, mapped_);
  base_ = nullptr;
}

void GuardedRegion::set_read_only(bool read_only) {
  protect_or_throw(base_ + page_size(), room_, read_only ? PROT_READ : PROT_READ | PROT_WRITE);
}

GuardedRegion::Where GuardedRegion::locate(const void* addr, ptrdiff_t* offset) const {
  const auto* p = static_cast<const unsigned char*>(addr);
  if (base_ == nullptr || p < base_ || p >= base_ + mapped_) return Where::outside;
  *offset = p - data_;
  if (p < data_) return Where::before;
  if (p < data_ + size_) return Where::inside;
  return Where::after;
}

// ---- FiberStacks ------------------------------------------------------------------------------

FiberStacks::FiberStacks(int count, size_t bytes) : count_(count) {
  page_ = page_size();
  bytes_ = round_up(bytes, page_);
  stride_ = bytes_ + page_;
  mapped_ = stride_ * static_cast<size_t>(count);
  base_ = map_or_throw(mapped_);
  for (int i = 0; i < count; ++i) protect_or_throw(base_ + static_cast<size_t>(i) * stride_, page_, PROT_NONE);
}

FiberStacks::~FiberStacks() {
  if (base_ != nullptr) unmap(base_, mapped_);
}

bool FiberStacks::in_guard(const void* addr) const {
  const auto* p = static_cast<const unsigned char*>(addr);
  if (p < base_ || p >= base_ + mapped_) return false;
  return static_cast<size_t>(p - base_) % stride_ < page_;
}

// ---- FaultTrap ----------------------------------------------------------------------------------

FaultTrap::FaultTrap() {
  // A fiber whose stack overflowed cannot run the handler: give it a stack of its own.
  sigaltstack(nullptr, &previous_alt_stack_);
  if ((previous_alt_stack_.ss_flags & SS_DISABLE) != 0) {
    alt_stack_bytes_ = round_up(256 * 1024, page_size());
    alt_stack_ = map_or_throw(alt_stack_bytes_);
    stack_t ours{};
    ours.ss_sp = alt_stack_;
    ours.ss_size = alt_stack_bytes_;
    ours.ss_flags = 0;
    DC_INTERNAL_CHECK(sigaltstack(&ours, nullptr) == 0, "sigaltstack failed: ", std::strerror(errno));
  }
  install_handlers();
}

FaultTrap::~FaultTrap() {
  uninstall_handlers();
  if (alt_stack_ != nullptr) {
    sigaltstack(&previous_alt_stack_, nullptr);
    unmap(alt_stack_, alt_stack_bytes_);
  }
}

bool run_trapping_faults(void (*body)(void*), void* arg, FaultInfo& fault) {
  // On the heap: nothing in this frame changes between sigsetjmp and the jump back.
  const auto landing = std::make_unique<Landing>();
  Landing* const outer = t_landing;
  note_landing_stack(*landing);
  if (sigsetjmp(landing->env, 1) != 0) {
    arrive_at_landing(*landing);
    t_landing = outer;
    fault = landing->info;
    return false;
  }
  t_landing = landing.get();
  body(arg);
  t_landing = outer;
  return true;
}

std::string signal_description(const FaultInfo& fault) {
  switch (fault.signo) {
    case SIGFPE:
      if (fault.code == FPE_INTDIV) return "SIGFPE (integer division by zero)";
      if (fault.code == FPE_INTOVF) return "SIGFPE (integer overflow)";
      return "SIGFPE (arithmetic exception)";
    case SIGBUS: return "SIGBUS (bus error)";
    case SIGSEGV: return "SIGSEGV (invalid memory access)";
    default: return "signal " + std::to_string(fault.signo);
  }
}

}  // namespace dc::emu
