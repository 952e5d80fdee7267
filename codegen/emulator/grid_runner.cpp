#include "emulator/grid_runner.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dc::emu {

// The host functions the kernel library calls (dc_emu_host_api); ctx is the GridRunner.
struct RunnerApi {
  static int block_barrier(void* ctx, int kind, int predicate) {
    return static_cast<GridRunner*>(ctx)->block_barrier(kind, predicate);
  }
  static unsigned long long warp_collective(void* ctx, int kind, unsigned int mask,
                                            unsigned long long value, int arg, int width) {
    return static_cast<GridRunner*>(ctx)->warp_collective(kind, mask, value, arg, width);
  }
  static void trap(void* ctx, const char* message) {
    static_cast<GridRunner*>(ctx)->fail_current(message != nullptr ? message : "trap");
  }
  static void warp_exchange(void* ctx, unsigned int mask, const void* mine, void* all, int bytes) {
    static_cast<GridRunner*>(ctx)->warp_exchange(mask, mine, all, bytes);
  }
  static void warp_exchange_aligned(void* ctx, const char* instruction, const void* mine, void* all,
                                    int bytes) {
    static_cast<GridRunner*>(ctx)->warp_exchange_aligned(instruction, mine, all, bytes);
  }
  static int is_shared(void* ctx, const void* p, unsigned long long bytes) {
    return static_cast<GridRunner*>(ctx)->is_shared(p, bytes) ? 1 : 0;
  }
  static int run_grid(void* ctx, void (*thread_main)(void*), void* closure, int num_params) {
    return static_cast<GridRunner*>(ctx)->run_grid(thread_main, closure, num_params);
  }
};

namespace {

const dc_emu_host_api kApi = {&RunnerApi::block_barrier, &RunnerApi::warp_collective,
                              &RunnerApi::trap,          &RunnerApi::warp_exchange,
                              &RunnerApi::warp_exchange_aligned, &RunnerApi::is_shared,
                              &RunnerApi::run_grid};

const char* barrier_name(int kind) {
  switch (kind) {
    case DC_EMU_BAR_COUNT: return "__syncthreads_count()";
    case DC_EMU_BAR_AND: return "__syncthreads_and()";
    case DC_EMU_BAR_OR: return "__syncthreads_or()";
    default: return "__syncthreads()";
  }
}

const char* collective_name(int kind) {
  switch (kind) {
    case DC_EMU_SHFL_IDX: return "__shfl_sync";
    case DC_EMU_SHFL_UP: return "__shfl_up_sync";
    case DC_EMU_SHFL_DOWN: return "__shfl_down_sync";
    case DC_EMU_SHFL_XOR: return "__shfl_xor_sync";
    case DC_EMU_VOTE_BALLOT: return "__ballot_sync";
    case DC_EMU_VOTE_ANY: return "__any_sync";
    case DC_EMU_VOTE_ALL: return "__all_sync";
    case DC_EMU_EXCHANGE: return "dc_emu_warp_exchange";
    case DC_EMU_EXCHANGE_ALIGNED: return "dc_emu_warp_exchange_aligned";
    default: return "__syncwarp";
  }
}

bool is_shuffle(int kind) { return kind >= DC_EMU_SHFL_IDX && kind <= DC_EMU_SHFL_XOR; }

std::string hex(unsigned int v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string dims(const dc_emu_uint3& v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

// "0-15, 32, 40-47" for sorted indices; long lists are cut short.
std::string ranges(const std::vector<int>& ids) {
  std::string out;
  int shown = 0;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (shown == 8) return out + ", ...";
    if (!out.empty()) out += ", ";
    out += std::to_string(ids[i]);
    if (j > i) out += "-" + std::to_string(ids[j]);
    ++shown;
    i = j + 1;
  }
  return out;
}

// The source lane of a shuffle, after PTX's shfl.sync: the lanes of a `width`-wide segment
// read within it (idx, up, down) or from it and earlier segments (bfly); a source out of range
// yields the caller's own value.
int shuffle_source(int kind, int lane, int arg, int width) {
  const int seg = 32 - width;  // PTX's segmask: the lane bits that select the segment
  const int min_lane = lane & seg;
  const int max_lane = min_lane | ((kind == DC_EMU_SHFL_UP ? 0 : 31) & ~seg);
  const auto b = static_cast<unsigned int>(arg);
  long long j = lane;
  bool valid = false;
  switch (kind) {
    case DC_EMU_SHFL_IDX:
      j = min_lane | static_cast<int>(b & 31u & ~static_cast<unsigned int>(seg));
      valid = j <= max_lane;
      break;
    case DC_EMU_SHFL_UP:
      j = static_cast<long long>(lane) - b;
      valid = j >= max_lane;
      break;
    case DC_EMU_SHFL_DOWN:
      j = static_cast<long long>(lane) + b;
      valid = j <= max_lane;
      break;
    default:
      j = static_cast<long long>(static_cast<unsigned int>(lane) ^ b);
      valid = j <= max_lane;
      break;
  }
  return valid ? static_cast<int>(j) : lane;
}

bool valid_width(int width) { return width >= 1 && width <= 32 && (width & (width - 1)) == 0; }

}  // namespace

GridRunner::GridRunner(dc_emu_state* state, unsigned char* tls, size_t tls_bytes,
                       FiberStacks& stacks)
    : state_(state), tls_(tls), tls_bytes_(tls_bytes), stacks_(stacks) {}

GridRunner::Outcome GridRunner::run(dc_emu_launch_fn stub, void* const* args,
                                    const GridLaunch& launch) {
  Outcome out;
  const auto& g = launch.grid;
  const auto& b = launch.block;
  const std::string config = "grid (" + std::to_string(g[0]) + "," + std::to_string(g[1]) + "," +
                             std::to_string(g[2]) + "), block (" + std::to_string(b[0]) + "," +
                             std::to_string(b[1]) + "," + std::to_string(b[2]) + ")";
  const char* bad = nullptr;
  if (g[0] < 1 || g[1] < 1 || g[2] < 1 || b[0] < 1 || b[1] < 1 || b[2] < 1)
    bad = "every dimension must be at least 1";
  else if (g[0] > 2147483647 || g[1] > 65535 || g[2] > 65535)
    bad = "grid dimensions are limited to (2^31-1, 65535, 65535)";
  else if (b[0] > 1024 || b[1] > 1024 || b[2] > 64 || b[0] * b[1] * b[2] > 1024)
    bad = "a block has at most 1024 threads and dimensions up to (1024, 1024, 64)";
  if (bad != nullptr) {
    out.error = "invalid launch configuration " + config + ": " + bad;
    return out;
  }
  num_threads_ = static_cast<int>(b[0] * b[1] * b[2]);
  if (num_threads_ > stacks_.count()) {
    out.error = "internal error: " + std::to_string(stacks_.count()) + " fiber stacks for a block of " +
                std::to_string(num_threads_) + " threads";
    return out;
  }

  launch_ = &launch;
  stub_ = stub;
  args_ = args;
  block_dim_ = {static_cast<unsigned int>(b[0]), static_cast<unsigned int>(b[1]),
                static_cast<unsigned int>(b[2])};
  grid_dim_ = {static_cast<unsigned int>(g[0]), static_cast<unsigned int>(g[1]),
               static_cast<unsigned int>(g[2])};
  fibers_ = std::vector<Fiber>(static_cast<size_t>(num_threads_));  // never moved once prepared
  warps_ = std::vector<Warp>(static_cast<size_t>((num_threads_ + 31) / 32));
  for (int i = 0; i < num_threads_; ++i) {
    Fiber& f = fibers_[static_cast<size_t>(i)];
    f.owner = this;
    const auto u = static_cast<unsigned int>(i);
    f.tid = {u % block_dim_.x, u / block_dim_.x % block_dim_.y, u / (block_dim_.x * block_dim_.y)};
    f.warp = i / 32;
    f.lane = i % 32;
    warps_[static_cast<size_t>(f.warp)].existing |= 1u << f.lane;
  }
  error_.clear();
  current_ = -1;

  struct Body {
    GridRunner* runner;
    int status;
  } body{this, 0};
  const bool completed = run_trapping_faults(
      +[](void* p) {
        auto* bd = static_cast<Body*>(p);
        bd->status = bd->runner->stub_(&kApi, bd->runner, bd->runner->args_);
      },
      &body, out.fault);
  if (!completed) {
    out.faulted = true;
    if (current_ >= 0) out.location = where(fibers_[static_cast<size_t>(current_)]);
    current_ = -1;
    return out;
  }
  if (body.status != 0) out.error = error_.empty() ? "the kernel stub failed" : error_;
  return out;
}

int GridRunner::run_grid(void (*thread_main)(void*), void* closure, int num_params) noexcept {
  if (num_params != launch_->num_args) {
    set_error("kernel '" + launch_->kernel + "' takes " + std::to_string(num_params) +
              " buffer parameters but its launch passes " + std::to_string(launch_->num_args));
    return 1;
  }
  thread_main_ = thread_main;
  closure_ = closure;
  for (unsigned int z = 0; z < grid_dim_.z; ++z)
    for (unsigned int y = 0; y < grid_dim_.y; ++y)
      for (unsigned int x = 0; x < grid_dim_.x; ++x)
        if (!run_block({x, y, z})) return 1;
  return 0;
}

void GridRunner::start_block(const dc_emu_uint3& block_idx) {
  // CUDA leaves shared memory uninitialised: poison it (0xff bytes: NaN, -1) so that a kernel
  // reading it before writing it fails its tests. The state lives in the same TLS block.
  std::memset(tls_, 0xff, tls_bytes_);
  state_->thread_idx = {0, 0, 0};
  state_->block_idx = block_idx;
  state_->block_dim = block_dim_;
  state_->grid_dim = grid_dim_;
  state_->dynamic_smem = launch_->dynamic_smem;
  state_->api = &kApi;
  state_->ctx = this;
  if (launch_->dynamic_smem != nullptr) std::memset(launch_->dynamic_smem, 0xff, launch_->dynamic_smem_bytes);
  block_idx_ = block_idx;
  for (int i = 0; i < num_threads_; ++i) {
    Fiber& f = fibers_[static_cast<size_t>(i)];
    f.state = State::ready;
    fiber_prepare(f.context, stacks_.stack(i), stacks_.bytes(), &GridRunner::fiber_entry, &f);
  }
  for (Warp& w : warps_) w.exited = w.waiting = 0;
  exited_ = 0;
  barrier_arrived_ = 0;
}

bool GridRunner::run_block(const dc_emu_uint3& block_idx) {
  start_block(block_idx);
  // Sweeps alternate direction, so that a missing barrier shows up whichever neighbour a
  // thread reads from.
  bool forward = true;
  while (exited_ < num_threads_) {
    bool ran = false;
    for (int k = 0; k < num_threads_; ++k) {
      const int i = forward ? k : num_threads_ - 1 - k;
      Fiber& f = fibers_[static_cast<size_t>(i)];
      if (f.state != State::ready) continue;
      current_ = i;
      state_->thread_idx = f.tid;
      fiber_switch(scheduler_, f.context);
      current_ = -1;
      ran = true;
      if (!error_.empty()) return false;
    }
    if (!ran) {
      set_error(deadlock_report());
      return false;
    }
    forward = !forward;
  }
  return true;
}

void GridRunner::fiber_entry(void* fiber) {
  Fiber& f = *static_cast<Fiber*>(fiber);
  GridRunner& r = *f.owner;
  r.thread_main_(r.closure_);
  r.on_exit(f);
}

void GridRunner::yield(Fiber& f) { fiber_switch(f.context, scheduler_); }

void GridRunner::on_exit(Fiber& f) {
  f.state = State::exited;
  ++exited_;
  Warp& w = warps_[static_cast<size_t>(f.warp)];
  w.exited |= 1u << f.lane;
  // A collective waits only for non-exited lanes: this exit may complete one.
  const int base = f.warp * 32;
  for (int l = 0; l < 32 && error_.empty(); ++l)
    if ((w.waiting >> l) & 1u) try_complete(f.warp, fibers_[static_cast<size_t>(base + l)].mask);
  fiber_switch(f.context, scheduler_);
  std::abort();  // an exited fiber is never resumed
}

int GridRunner::block_barrier(int kind, int predicate) noexcept {
  Fiber& f = fibers_[static_cast<size_t>(current_)];
  if (barrier_arrived_ > 0 && kind != barrier_kind_)
    fail_current(std::string("reached ") + barrier_name(kind) + " while other threads wait at " +
                 barrier_name(barrier_kind_));
  barrier_kind_ = kind;
  f.value = predicate != 0;
  f.state = State::block_barrier;
  if (++barrier_arrived_ < num_threads_) {
    yield(f);
    return static_cast<int>(f.result);
  }
  // Every thread of the block has arrived: release them all; this one goes on.
  int count = 0;
  for (const Fiber& g : fibers_) count += g.value != 0;
  int result = 0;
  if (kind == DC_EMU_BAR_COUNT) result = count;
  if (kind == DC_EMU_BAR_AND) result = count == num_threads_;
  if (kind == DC_EMU_BAR_OR) result = count > 0;
  for (Fiber& g : fibers_) {
    g.state = State::ready;
    g.result = static_cast<unsigned long long>(result);
  }
  barrier_arrived_ = 0;
  return result;
}

unsigned long long GridRunner::warp_collective(int kind, unsigned int mask, unsigned long long value,
                                               int arg, int width) noexcept {
  Fiber& f = fibers_[static_cast<size_t>(current_)];
  if (is_shuffle(kind) && !valid_width(width))
    fail_current(std::string(collective_name(kind)) + " with width " + std::to_string(width) +
                 " (a power of two from 1 to 32)");
  f.value = value;
  f.arg = arg;
  f.width = width;
  collective(f, kind, mask);
  return f.result;
}

void GridRunner::warp_exchange(unsigned int mask, const void* mine, void* all, int bytes) noexcept {
  Fiber& f = fibers_[static_cast<size_t>(current_)];
  if (bytes <= 0) fail_current("dc_emu_warp_exchange of " + std::to_string(bytes) + " bytes");
  f.value = reinterpret_cast<uintptr_t>(mine);
  f.out = all;
  f.arg = bytes;
  collective(f, DC_EMU_EXCHANGE, mask);
}

void GridRunner::warp_exchange_aligned(const char* instruction, const void* mine, void* all,
                                       int bytes) noexcept {
  Fiber& f = fibers_[static_cast<size_t>(current_)];
  if (bytes <= 0) fail_current("dc_emu_warp_exchange_aligned of " + std::to_string(bytes) + " bytes");
  f.value = reinterpret_cast<uintptr_t>(mine);
  f.out = all;
  f.arg = bytes;
  f.instruction = instruction != nullptr ? instruction : "a .sync.aligned instruction";
  collective(f, DC_EMU_EXCHANGE_ALIGNED, 0xffffffffu);
}

bool GridRunner::is_shared(const void* p, unsigned long long bytes) const noexcept {
  const auto inside = [&](const unsigned char* base, size_t size) {
    const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base);
    return base != nullptr && a >= b && a - b <= size && bytes <= size - (a - b);
  };
  return inside(tls_, tls_bytes_) || inside(launch_->dynamic_smem, launch_->dynamic_smem_bytes);
}

std::string GridRunner::collective_label(const Fiber& f) {
  return f.kind == DC_EMU_EXCHANGE_ALIGNED ? std::string(f.instruction) : collective_name(f.kind);
}

void GridRunner::collective(Fiber& f, int kind, unsigned int mask) noexcept {
  const unsigned int bit = 1u << f.lane;
  if ((mask & bit) == 0)
    fail_current(std::string(collective_name(kind)) + " with mask " + hex(mask) + " called by lane " +
                 std::to_string(f.lane) + ", which the mask does not include");
  f.kind = kind;
  f.mask = mask;
  f.state = State::warp_collective;
  warps_[static_cast<size_t>(f.warp)].waiting |= bit;
  try_complete(f.warp, mask);
  if (!error_.empty()) fail_current(error_);
  if (f.state == State::warp_collective) yield(f);
}

void GridRunner::try_complete(int warp, unsigned int mask) {
  const Warp& w = warps_[static_cast<size_t>(warp)];
  const int base = warp * 32;
  const unsigned int required = mask & w.existing & ~w.exited;
  // Members are waiting lanes, so until every required lane waits there is nothing to scan:
  // this keeps an arrival O(1) and a whole collective O(32), not O(32^2).
  if ((w.waiting & required) != required) return;
  unsigned int members = 0;
  for (int l = 0; l < 32; ++l)
    if (((w.waiting >> l) & 1u) && fibers_[static_cast<size_t>(base + l)].mask == mask) members |= 1u << l;
  if ((members & required) == required && members != 0) complete(warp, members);
}

void GridRunner::complete(int warp, unsigned int members) {
  Warp& w = warps_[static_cast<size_t>(warp)];
  const int base = warp * 32;
  auto lane_fiber = [&](int l) -> Fiber& { return fibers_[static_cast<size_t>(base + l)]; };
  const int first = __builtin_ctz(members);
  const int kind = lane_fiber(first).kind;
  unsigned int ballot = 0;
  for (int l = 0; l < 32; ++l) {
    if (((members >> l) & 1u) == 0) continue;
    const Fiber& g = lane_fiber(l);
    if (g.kind != kind || (kind == DC_EMU_EXCHANGE_ALIGNED &&
                           std::strcmp(g.instruction, lane_fiber(first).instruction) != 0)) {
      set_error("block " + dims(block_idx_) + ", warp " + std::to_string(warp) + ": lanes " +
                std::to_string(first) + " and " + std::to_string(l) + " met in different warp collectives (" +
                collective_label(lane_fiber(first)) + " and " + collective_label(g) + ") with mask " +
                hex(g.mask));
      return;
    }
    if (kind == DC_EMU_EXCHANGE && g.arg != lane_fiber(first).arg) {
      set_error("block " + dims(block_idx_) + ", warp " + std::to_string(warp) + ": lanes " +
                std::to_string(first) + " and " + std::to_string(l) + " exchange different sizes (" +
                std::to_string(lane_fiber(first).arg) + " and " + std::to_string(g.arg) + " bytes)");
      return;
    }
    if (g.value != 0) ballot |= 1u << l;
  }
  if (kind == DC_EMU_EXCHANGE_ALIGNED && members != 0xffffffffu) {
    // .sync.aligned: every lane of the warp executes the same instruction, none may be missing.
    std::vector<int> gone, absent;
    for (int l = 0; l < 32; ++l) {
      if ((members >> l) & 1u) continue;
      ((w.existing >> l) & 1u ? gone : absent).push_back(l);
    }
    std::string why;
    const auto lanes = [](const std::vector<int>& l) { return (l.size() == 1 ? "lane " : "lanes ") + ranges(l); };
    if (!gone.empty()) why = lanes(gone) + (gone.size() == 1 ? " has exited" : " have exited");
    if (!absent.empty())
      why += (why.empty() ? "" : " and ") + lanes(absent) +
             (absent.size() == 1 ? " does not exist" : " do not exist") + " (the block's last warp is partial)";
    set_error("block " + dims(block_idx_) + ", warp " + std::to_string(warp) + ": " +
              collective_label(lane_fiber(first)) + " needs all 32 lanes of the warp, but " + why);
    return;
  }
  for (int l = 0; l < 32; ++l) {
    if (((members >> l) & 1u) == 0) continue;
    Fiber& g = lane_fiber(l);
    if (is_shuffle(kind)) {
      // Reading a lane that does not take part (not in the mask, exited, or beyond a partial
      // warp) is undefined in CUDA: it yields poison here.
      const int src = shuffle_source(kind, l, g.arg, g.width);
      g.result = ((members >> src) & 1u) ? lane_fiber(src).value : ~0ull;
    } else if (kind == DC_EMU_EXCHANGE || kind == DC_EMU_EXCHANGE_ALIGNED) {
      // Every member's stack is alive (suspended or running), so `mine` can be read directly.
      const auto bytes = static_cast<size_t>(g.arg);
      auto* all = static_cast<unsigned char*>(g.out);
      for (int src = 0; src < 32; ++src) {
        if ((members >> src) & 1u)
          std::memcpy(all + static_cast<size_t>(src) * bytes,
                      reinterpret_cast<const void*>(static_cast<uintptr_t>(lane_fiber(src).value)), bytes);
        else
          std::memset(all + static_cast<size_t>(src) * bytes, 0xff, bytes);
      }
      g.result = 0;
    } else if (kind == DC_EMU_VOTE_BALLOT) {
      g.result = ballot;
    } else if (kind == DC_EMU_VOTE_ANY) {
      g.result = ballot != 0;
    } else if (kind == DC_EMU_VOTE_ALL) {
      g.result = ballot == members;
    } else {
      g.result = 0;
    }
    g.state = State::ready;
  }
  w.waiting &= ~members;
}

void GridRunner::fail_current(std::string message) noexcept {
  if (current_ < 0) std::abort();  // only kernel code (a fiber) can fail this way
  Fiber& f = fibers_[static_cast<size_t>(current_)];
  set_error(message.rfind("block (", 0) == 0 ? message : where(f) + ": " + message);
  // This frame and the caller's never return: free the message (the caller's temporary, by
  // value here) now, or it leaks.
  std::string().swap(message);
  f.state = State::failed;
  fiber_switch(f.context, scheduler_);
  std::abort();  // a failed fiber is never resumed
}

void GridRunner::set_error(const std::string& message) {
  if (error_.empty()) error_ = message;
}

std::string GridRunner::where(const Fiber& f) const {
  return "block " + dims(block_idx_) + ", thread " + dims(f.tid);
}

std::string GridRunner::deadlock_report() const {
  std::vector<int> at_barrier, exited;
  std::string collectives;
  for (int i = 0; i < num_threads_; ++i) {
    const Fiber& f = fibers_[static_cast<size_t>(i)];
    if (f.state == State::block_barrier) at_barrier.push_back(i);
    if (f.state == State::exited) exited.push_back(i);
  }
  for (size_t w = 0; w < warps_.size(); ++w) {
    unsigned int pending = warps_[w].waiting;
    while (pending != 0) {
      const Fiber& first = fibers_[w * 32 + static_cast<size_t>(__builtin_ctz(pending))];
      std::vector<int> lanes;
      for (int l = 0; l < 32; ++l) {
        if (((pending >> l) & 1u) == 0) continue;  // set bits are lanes that exist
        if (fibers_[w * 32 + static_cast<size_t>(l)].mask == first.mask) {
          lanes.push_back(static_cast<int>(w * 32) + l);
          pending &= ~(1u << l);
        }
      }
      collectives += "; threads " + ranges(lanes) + " wait in " + collective_label(first) +
                     "(mask " + hex(first.mask) + ")";
    }
  }
  std::string out = "deadlock in block " + dims(block_idx_) + ": no thread can continue";
  if (!at_barrier.empty())
    out += "; threads " + ranges(at_barrier) + " wait at " + barrier_name(barrier_kind_);
  out += collectives;
  if (!exited.empty()) out += "; threads " + ranges(exited) + " have exited";
  if (block_dim_.y * block_dim_.z > 1) out += " (linear thread indices)";
  out += ". Every thread of a block must reach the same __syncthreads(), and every non-exited lane "
         "named in a warp collective's mask the same collective.";
  return out;
}

}  // namespace dc::emu
