// The emulator's scheduler: runs one launch of a compiled kernel library. Blocks run one
// after another; the threads of a block are fibers that run until they reach a barrier:
// __syncthreads() waits for every thread of the block, a warp collective for every
// non-exited lane named in its mask. A block in which no fiber can continue is a deadlock,
// reported as an error with what each thread waits for.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#define DC_EMU_ABI_ONLY
#include "emulator/dc_emu_runtime.h"
#undef DC_EMU_ABI_ONLY
#include "emulator/fiber.h"
#include "emulator/guarded_memory.h"

namespace dc::emu {

struct GridLaunch {
  std::string kernel;
  std::array<int64_t, 3> grid{1, 1, 1};
  std::array<int64_t, 3> block{1, 1, 1};
  unsigned char* dynamic_smem = nullptr;  // poisoned at each block start
  size_t dynamic_smem_bytes = 0;
  int num_args = 0;
};

class GridRunner {
 public:
  // state: the kernel library's dc_emu_state for this OS thread; [tls, tls + tls_bytes): the
  // library's TLS block (shared memory and the state), poisoned at each block start.
  GridRunner(dc_emu_state* state, unsigned char* tls, size_t tls_bytes, FiberStacks& stacks);
  GridRunner(const GridRunner&) = delete;
  GridRunner& operator=(const GridRunner&) = delete;

  struct Outcome {
    std::string error;      // "" if the launch ran to completion
    bool faulted = false;   // a signal ended it (error is then empty: the caller knows the memory)
    FaultInfo fault;
    std::string location;   // "block (0,1,0), thread (3,0,0)" of the faulting thread, if any
  };
  // Runs the launch through its DC_EXPORT_KERNEL stub. Errors (a deadlock, a trap, a misused
  // collective, a bad launch) say where they happened.
  Outcome run(dc_emu_launch_fn stub, void* const* args, const GridLaunch& launch);

 private:
  enum class State : uint8_t { ready, block_barrier, warp_collective, exited, failed };
  struct Fiber {
    FiberContext context;
    GridRunner* owner = nullptr;
    dc_emu_uint3 tid{};
    int warp = 0, lane = 0;
    State state = State::ready;
    int kind = 0;                  // barrier or collective kind
    unsigned int mask = 0;         // warp collective mask
    unsigned long long value = 0;  // predicate, shuffled bits, or exchanged data's address
    int arg = 0, width = 32;       // lane/delta/mask, or bytes exchanged
    void* out = nullptr;           // where an exchange delivers
    const char* instruction = "";  // the .sync.aligned instruction of an aligned exchange
    unsigned long long result = 0;
  };
  struct Warp {
    unsigned int existing = 0;  // lanes that exist (a partial last warp has fewer)
    unsigned int exited = 0;
    unsigned int waiting = 0;   // lanes inside a warp collective
  };

  friend struct RunnerApi;
  int run_grid(void (*thread_main)(void*), void* closure, int num_params) noexcept;
  int block_barrier(int kind, int predicate) noexcept;
  unsigned long long warp_collective(int kind, unsigned int mask, unsigned long long value, int arg,
                                     int width) noexcept;
  void warp_exchange(unsigned int mask, const void* mine, void* all, int bytes) noexcept;
  void warp_exchange_aligned(const char* instruction, const void* mine, void* all, int bytes) noexcept;
  bool is_shared(const void* p, unsigned long long bytes) const noexcept;
  static std::string collective_label(const Fiber& f);  // the collective's name in messages
  void collective(Fiber& f, int kind, unsigned int mask) noexcept;  // joins and waits
  [[noreturn]] void fail_current(std::string message) noexcept;
  static void fiber_entry(void* fiber);

  bool run_block(const dc_emu_uint3& block_idx);
  void start_block(const dc_emu_uint3& block_idx);
  void yield(Fiber& f);
  void try_complete(int warp, unsigned int mask);
  void complete(int warp, unsigned int members);
  void on_exit(Fiber& f);
  void set_error(const std::string& message);
  std::string where(const Fiber& f) const;
  std::string deadlock_report() const;

  dc_emu_state* state_;
  unsigned char* tls_;
  size_t tls_bytes_;
  FiberStacks& stacks_;

  const GridLaunch* launch_ = nullptr;
  dc_emu_launch_fn stub_ = nullptr;
  void* const* args_ = nullptr;
  void (*thread_main_)(void*) = nullptr;
  void* closure_ = nullptr;
  dc_emu_uint3 block_dim_{}, grid_dim_{}, block_idx_{};

  std::vector<Fiber> fibers_;
  std::vector<Warp> warps_;
  FiberContext scheduler_;
  int num_threads_ = 0;
  int current_ = -1;  // the running fiber, -1 in the scheduler
  int exited_ = 0;
  int barrier_arrived_ = 0;
  int barrier_kind_ = 0;
  std::string error_;
};

}  // namespace dc::emu
