// Fibers for the host emulator: one per emulated thread of a block, each with its own stack,
// switched cooperatively on one OS thread. x86-64 uses a small assembly switch (six
// callee-saved registers and the stack pointer); other targets use ucontext.
#pragma once

#include <cstddef>

// Sanitized builds (scripts/test.sh --sanitize, --tsan) tell the sanitizer about each switch:
// without that, ASan and TSan take a fiber's stack for the thread's and report false errors.
#if defined(__SANITIZE_ADDRESS__)
#define DC_EMU_ASAN_FIBERS 1
#endif
#if defined(__SANITIZE_THREAD__)
#define DC_EMU_TSAN_FIBERS 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DC_EMU_ASAN_FIBERS 1
#endif
#if __has_feature(thread_sanitizer)
#define DC_EMU_TSAN_FIBERS 1
#endif
#endif

#if !defined(__x86_64__) || defined(DC_EMU_FIBER_UCONTEXT)
#define DC_EMU_USE_UCONTEXT 1
#include <ucontext.h>
#endif

namespace dc::emu {

struct FiberContext {
#ifdef DC_EMU_USE_UCONTEXT
  ucontext_t uc;
#else
  void* sp = nullptr;  // saved stack pointer while suspended
#endif
  void (*entry)(void*) = nullptr;  // what a prepared fiber starts with
  void* arg = nullptr;
#ifdef DC_EMU_ASAN_FIBERS
  const void* stack_lo = nullptr;  // this context's stack, for ASan (the thread's: learnt at
  size_t stack_size = 0;           // the first switch away from it)
#endif
#ifdef DC_EMU_TSAN_FIBERS
  void* tsan_fiber = nullptr;  // TSan's fiber: created by fiber_prepare, else the thread's
  bool owns_tsan_fiber = false;
#endif
  FiberContext() = default;
  FiberContext(const FiberContext&) = delete;
  FiberContext& operator=(const FiberContext&) = delete;
  ~FiberContext();
};

// Makes `fiber` start entry(arg) on the stack [stack_lo, stack_lo + size) when it is next
// switched to. entry must never return: it ends by switching away for good. `fiber` must not
// move while prepared (its start reads it).
void fiber_prepare(FiberContext& fiber, unsigned char* stack_lo, size_t size,
                   void (*entry)(void*), void* arg);

// Saves the running context into `from` and resumes `to`.
void fiber_switch(FiberContext& from, FiberContext& to);

}  // namespace dc::emu
