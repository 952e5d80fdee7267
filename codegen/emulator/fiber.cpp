#include "emulator/fiber.h"

#include <cstdint>

#include "ir/error.h"

#ifdef DC_EMU_ASAN_FIBERS
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef DC_EMU_TSAN_FIBERS
#include <sanitizer/tsan_interface.h>
#endif

#ifndef DC_EMU_USE_UCONTEXT
// dc_emu_fiber_switch(save_sp, load_sp): pushes the callee-saved registers, stores the stack
// pointer, loads the other one and pops its registers. A fresh fiber's stack holds zeroed
// registers with r12 = arg, r13 = entry, and returns into dc_emu_fiber_start.
extern "C" void dc_emu_fiber_switch(void** save_sp, void* load_sp);
extern "C" void dc_emu_fiber_start();
asm(R"(
  .text
  .p2align 4
  .globl dc_emu_fiber_switch
  .hidden dc_emu_fiber_switch
  .type dc_emu_fiber_switch, @function
dc_emu_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size dc_emu_fiber_switch, .-dc_emu_fiber_switch

  .p2align 4
  .globl dc_emu_fiber_start
  .hidden dc_emu_fiber_start
  .type dc_emu_fiber_start, @function
dc_emu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size dc_emu_fiber_start, .-dc_emu_fiber_start
)");
#endif

namespace dc::emu {

namespace {

#ifdef DC_EMU_ASAN_FIBERS
// The context that made the last switch on this thread: the resumed side learns its stack
// from ASan (the thread's own stack is known only that way).
thread_local FiberContext* t_switched_from = nullptr;
#endif

// Sanitizer bookkeeping on each side of a switch; nothing in other builds.
void before_switch(FiberContext& from, FiberContext& to, void** fake_stack) {
#ifdef DC_EMU_TSAN_FIBERS
  if (from.tsan_fiber == nullptr) from.tsan_fiber = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(to.tsan_fiber, 0);
#endif
#ifdef DC_EMU_ASAN_FIBERS
  t_switched_from = &from;
  __sanitizer_start_switch_fiber(fake_stack, to.stack_lo, to.stack_size);
#else
  (void)from, (void)to, (void)fake_stack;
#endif
}

void after_switch(void* fake_stack) {
#ifdef DC_EMU_ASAN_FIBERS
  FiberContext* from = t_switched_from;
  __sanitizer_finish_switch_fiber(fake_stack, &from->stack_lo, &from->stack_size);
#else
  (void)fake_stack;
#endif
}

// Every fiber starts here, with its own context.
void fiber_begin(void* context) {
  after_switch(nullptr);
  auto* fiber = static_cast<FiberContext*>(context);
  fiber->entry(fiber->arg);
}

void prepare_sanitizers(FiberContext& fiber, unsigned char* stack_lo, size_t size) {
#ifdef DC_EMU_ASAN_FIBERS
  // A fiber that failed or exited never unwound: its frames' redzones are still poisoned.
  ASAN_UNPOISON_MEMORY_REGION(stack_lo, size);
  fiber.stack_lo = stack_lo;
  fiber.stack_size = size;
#endif
#ifdef DC_EMU_TSAN_FIBERS
  // A fresh TSan fiber each time: the old one's shadow call stack never unwound either.
  if (fiber.owns_tsan_fiber) __tsan_destroy_fiber(fiber.tsan_fiber);
  fiber.tsan_fiber = __tsan_create_fiber(0);
  fiber.owns_tsan_fiber = true;
#endif
  (void)fiber, (void)stack_lo, (void)size;
}

#ifdef DC_EMU_USE_UCONTEXT
// makecontext passes int arguments: the context's address travels as two halves.
void trampoline(unsigned int hi, unsigned int lo) {
  fiber_begin(reinterpret_cast<void*>((static_cast<uintptr_t>(hi) << 32) | lo));
}
#endif

}  // namespace

FiberContext::~FiberContext() {
#ifdef DC_EMU_TSAN_FIBERS
  if (owns_tsan_fiber) __tsan_destroy_fiber(tsan_fiber);
#endif
}

#ifndef DC_EMU_USE_UCONTEXT

void fiber_prepare(FiberContext& fiber, unsigned char* stack_lo, size_t size,
                   void (*entry)(void*), void* arg) {
  prepare_sanitizers(fiber, stack_lo, size);
  fiber.entry = entry;
  fiber.arg = arg;
  auto top = reinterpret_cast<uintptr_t>(stack_lo + size) & ~uintptr_t{15};
  auto* slot = reinterpret_cast<void**>(top);
  // After the six pops and `ret`, rsp == top (16-byte aligned) as dc_emu_fiber_start's call
  // requires.
  *--slot = reinterpret_cast<void*>(&dc_emu_fiber_start);
  *--slot = nullptr;                               // rbp
  *--slot = nullptr;                               // rbx
  *--slot = &fiber;                                // r12
  *--slot = reinterpret_cast<void*>(&fiber_begin);  // r13
  *--slot = nullptr;                               // r14
  *--slot = nullptr;                               // r15
  fiber.sp = slot;
}

void fiber_switch(FiberContext& from, FiberContext& to) {
  void* fake_stack = nullptr;
  before_switch(from, to, &fake_stack);
  dc_emu_fiber_switch(&from.sp, to.sp);
  after_switch(fake_stack);
}

#else

void fiber_prepare(FiberContext& fiber, unsigned char* stack_lo, size_t size,
                   void (*entry)(void*), void* arg) {
  prepare_sanitizers(fiber, stack_lo, size);
  fiber.entry = entry;
  fiber.arg = arg;
  DC_INTERNAL_CHECK(getcontext(&fiber.uc) == 0, "getcontext failed");
  fiber.uc.uc_stack.ss_sp = stack_lo;
  fiber.uc.uc_stack.ss_size = size;
  fiber.uc.uc_link = nullptr;
  const auto bits = reinterpret_cast<uintptr_t>(&fiber);
  makecontext(&fiber.uc, reinterpret_cast<void (*)()>(&trampoline), 2,
              static_cast<unsigned int>(static_cast<uint64_t>(bits) >> 32),
              static_cast<unsigned int>(bits & 0xffffffffu));
}

void fiber_switch(FiberContext& from, FiberContext& to) {
  void* fake_stack = nullptr;
  before_switch(from, to, &fake_stack);
  swapcontext(&from.uc, &to.uc);
  after_switch(fake_stack);
}

#endif

}  // namespace dc::emu
