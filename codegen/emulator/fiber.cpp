#include "emulator/fiber.h"

#include <cstdint>

#include "ir/error.h"

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

#ifndef DC_EMU_USE_UCONTEXT

void fiber_prepare(FiberContext& fiber, unsigned char* stack_lo, size_t size,
                   void (*entry)(void*), void* arg) {
  auto top = reinterpret_cast<uintptr_t>(stack_lo + size) & ~uintptr_t{15};
  auto* slot = reinterpret_cast<void**>(top);
  // After the six pops and `ret`, rsp == top (16-byte aligned) as dc_emu_fiber_start's call
  // requires.
  *--slot = reinterpret_cast<void*>(&dc_emu_fiber_start);
  *--slot = nullptr;                               // rbp
  *--slot = nullptr;                               // rbx
  *--slot = arg;                                   // r12
  *--slot = reinterpret_cast<void*>(entry);        // r13
  *--slot = nullptr;                               // r14
  *--slot = nullptr;                               // r15
  fiber.sp = slot;
}

void fiber_switch(FiberContext& from, FiberContext& to) { dc_emu_fiber_switch(&from.sp, to.sp); }

#else

namespace {

struct Start {
  void (*entry)(void*);
  void* arg;
};

// makecontext passes int arguments: the Start record travels as two halves.
void trampoline(unsigned int hi, unsigned int lo) {
  const auto bits = (static_cast<uintptr_t>(hi) << 32) | lo;
  auto* start = reinterpret_cast<Start*>(bits);
  start->entry(start->arg);
}

}  // namespace

void fiber_prepare(FiberContext& fiber, unsigned char* stack_lo, size_t size,
                   void (*entry)(void*), void* arg) {
  DC_INTERNAL_CHECK(getcontext(&fiber.uc) == 0, "getcontext failed");
  // The Start record sits at the top of the fiber's own stack, below what makecontext uses.
  auto top = reinterpret_cast<uintptr_t>(stack_lo + size) & ~uintptr_t{63};
  auto* start = reinterpret_cast<Start*>(top - 64);
  start->entry = entry;
  start->arg = arg;
  fiber.uc.uc_stack.ss_sp = stack_lo;
  fiber.uc.uc_stack.ss_size = size - 64;
  fiber.uc.uc_link = nullptr;
  const auto bits = reinterpret_cast<uintptr_t>(start);
  makecontext(&fiber.uc, reinterpret_cast<void (*)()>(&trampoline), 2,
              static_cast<unsigned int>(static_cast<uint64_t>(bits) >> 32),
              static_cast<unsigned int>(bits & 0xffffffffu));
}

void fiber_switch(FiberContext& from, FiberContext& to) { swapcontext(&from.uc, &to.uc); }

#endif

}  // namespace dc::emu
