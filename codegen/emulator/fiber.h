// Fibers for the host emulator: one per emulated thread of a block, each with its own stack,
// switched cooperatively on one OS thread. x86-64 uses a small assembly switch (six
// callee-saved registers and the stack pointer); other targets use ucontext.
#pragma once

#include <cstddef>

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
};

// Makes `fiber` start entry(arg) on the stack [stack_lo, stack_lo + size) when it is next
// switched to. entry must never return: it ends by switching away for good.
void fiber_prepare(FiberContext& fiber, unsigned char* stack_lo, size_t size,
                   void (*entry)(void*), void* arg);

// Saves the running context into `from` and resumes `to`.
void fiber_switch(FiberContext& from, FiberContext& to);

}  // namespace dc::emu
