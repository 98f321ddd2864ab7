// The replay engine: traces an iteration, plans, then evicts and regenerates activations
// on every later iteration, under a strict budget.
//
// Note [Iteration lifecycle]
// Rationale: eviction is only safe if we know, at each launch, which buffers the rest of
//   the iteration will touch and how to regenerate each one. A training iteration repeats,
//   so one traced iteration tells us all of it; correctness must still never depend on the
//   trace being right.
// Approach: TRACE (the recorder records; nothing is evicted) -> PLAN (analyse the trace,
//   run the planner, set the allocator's budget) -> VALIDATE (the first iterations with
//   evictions keep a host-side copy of every evicted buffer and compare it with what the
//   replay regenerates; a mismatch restores the copy, so the iteration stays correct, and
//   marks the buffer never-evict for the next plan) -> STEADY. Every iteration is compared
//   with the trace as it runs (each allocation's size, each launch's kernel); at the first
//   difference every evicted buffer is regenerated, eviction stops for the iteration and
//   the next one is traced again.
// Limitations: with a budget that is a multiple of the traced peak ("0.5x") the traced
//   iterations run without a budget: the peak that defines it is not known before them.
//   An absolute budget (bytes, or a share of device memory) holds from the first traced
//   iteration on (Note [Offloading the traced iteration]).
//
// Note [Offloading the traced iteration]
// Rationale: a model whose traced iteration does not fit in the device, or in an
//   absolute budget, could otherwise never be planned: the plan needs the trace. Nothing
//   is known yet about how to recompute a buffer, but its bytes can always be kept.
// Approach: with an absolute budget the allocator's budget is set from the first traced
//   iteration on, and blocks of at least a page are placed evictable (dedicated pages)
//   while tracing. When a mapping does not fit, the pressure handler offloads live
//   evictable blocks to host memory (replay_device::download, stream-ordered, then
//   caching_allocator::evict): the least recently touched first (the engine scans every
//   launch's parameters, copies' and sets' ranges, for the blocks they touch), never one
//   the launch entering now touches, until the shortfall is covered. At the ENTER of a
//   launch, copy or set touching an offloaded block, the block is restored (restore,
//   then upload of the host copy) before it is queued; a recipe launch replayed later
//   does the same. A free drops the host copy. None of this is recorded: the engine's
//   own work is not intercepted, and the engine's launch hook must run before the
//   tracer's collector so that write observation hashes the restored bytes
//   (host_runtime registers it first). The plan's caching overhead is measured on the
//   peak the iteration would have had without offloading (mapped, less pooled chunks,
//   plus the offloaded blocks).
//   engine_options::budget_traced_iterations = false keeps the traced iterations
//   unbudgeted (a recording for `sublinear plan` is made that way).
// Limitations: placing blocks evictable while tracing changes the allocator's layout, so
//   a trace under an absolute budget is not the same as an unbudgeted recording; the
//   offloads cost a host copy each way. Offloading waits for the block's own stream only
//   (a block used on other streams through record_stream while they run: not handled);
//   a block is seen as touched only through a pointer word in the parameters (as the
//   safety net); blocks allocated in planned iterations are not tracked (a trace after a
//   divergence cannot offload them). With nothing offloadable (every live block
//   non-evictable, offloaded, or needed by the launch entering now) the rest of that
//   traced iteration runs without a budget, with a warning naming the budget and the
//   shortfall, and its report shows no budget: the plan may still meet the budget (it
//   evicts blocks under a page too, which offloading cannot), and failing the program
//   would lose the run. Models of many small buffers (an LSTM of 64-2,048 steps at its
//   smallest feasible budget) needed this.
//
// Note [Replay at the launch]
// Evictions happen right after the launch at `evict_after` is issued: the allocator
// records an event on the block's streams and unmaps once it has completed (Note
// [Deferred unmap]). Regeneration happens at launch ENTER of `restore_before`, and, as a
// safety net, at the ENTER of any launch whose parameters point into an evicted block: the
// pages are mapped again at the same address and the recipe's launches are queued on the
// entering launch's stream before it, with the parameter bytes they had in this iteration.
// Temporaries get scratch blocks at other addresses and the parameter words pointing at
// them are rewritten. Launches the engine queues itself are not intercepted again.
//
// Note [Prefetch]
// Rationale: regenerating at the ENTER of the launch that needs a buffer puts the map
//   calls, the scratch allocations and the recipe's launches right in front of that
//   launch: on a device whose host thread runs ahead of its stream, the stream drains
//   while the host maps and queues. The plan's restore point is the latest moment, not
//   the only one.
// Approach: at every ENTER the engine looks `engine_options::prefetch_launches` launches
//   ahead and regenerates the entries due there now, on the entering launch's stream,
//   when their recipes can already run (every recipe launch seen, inputs resident and
//   unchanged) and the budget has room for their targets and temporaries with a
//   thirty-second of the budget to spare. Entries that do not fit are regenerated at
//   their restore point as before, and the ENTER safety net stays. An entry whose own
//   target is still to be evicted is not prefetched (session 28): its recipe would run
//   for the buffers it regenerates on the way and then again, at its restore point, for
//   the target (a chain under greedy replayed 8 launches an iteration for a plan of 6).
// Limitations: a prefetched buffer occupies pages a few launches longer than the plan
//   predicted; the room check and the pressure valve bound what that can cost.
//
// Note [Recipe scratch]
// Rationale: a recipe's temporaries (workspaces freed after the original launch, side
//   outputs, inputs rebuilt out of place) were all mapped before its first launch and
//   released after its last, so a recipe through four convolutions held four im2col
//   workspaces at once where the original iteration held one at a time. At tight budgets
//   the peak sits inside such a recipe (ResNet-152: 1.25 MiB of scratch on a 6.4 MiB
//   plan), and what the planner must leave for it is memory it cannot drop.
// Approach: a temporary gets its scratch block just before the first recipe launch that
//   touches it (a live side output copied in then: nothing has changed it since the
//   recipe began) and gives it back, stream-ordered, right after the last one is queued,
//   so a later temporary of the same recipe can reuse it, as the original iteration's
//   allocations did. The simulator counts the same thing (scratch_bytes: the most bytes
//   held at once, by first and last touching recipe launch).
// Limitations: the allocator, not a precomputed layout, places the blocks, so reuse relies
//   on best fit finding the freed block; a block it cannot reuse costs pages the model
//   does not see, which the planning margin and the pressure valve absorb. Out of memory
//   partway through a recipe evicts its regenerated buffers again (their bytes are
//   incomplete) before the error propagates.
//
// Note [Pressure valve]
// Rationale: the planner predicts peaks from the traced iteration; fragmentation, the
//   chunk pool, prefetches and kernels whose timing shifts can still need pages the plan
//   did not foresee. A strict budget must then evict more rather than fail.
// Approach: the engine installs a pressure handler on the allocator (Note [Strict
//   budget]). Asked for `shortfall` bytes, it ranks the resident buffers it placed
//   evictable: never used again this iteration first, then latest next use (the launch
//   that will need it), then cheapest recompute per byte, and evicts them until the
//   shortfall is covered. A buffer qualifies only if its regeneration will be valid at
//   its next use: the launch entering now does not touch it, its plan entry's recipe has
//   run in this iteration and was its last writer, and nothing the recipe reads or writes
//   is written between now and that next use (the trace says who writes what). The
//   buffer comes back through the ENTER safety net. If nothing qualifies and the request
//   was for a buffer the plan places evictable, the allocator serves it from a free block
//   of a shared segment instead (Note [Strict budget]): the engine then keeps it resident
//   for the iteration, skipping its planned eviction (its recipes still run for the other
//   buffers they carry and rewrite it with the bytes it holds), and counts it in
//   iteration_report::kept_resident. Otherwise the allocator fails with out_of_memory
//   naming the budget, the shortfall and what the engine tried.
// Limitations: only buffers the plan placed evictable (dedicated pages) can go; pressure
//   from buffers the plan keeps resident still fails.
// Note [Stray pointer words]
// Rationale: the ENTER safety net regenerates an evicted block when a launch's parameters
//   point into it. Kernel parameter blocks are not all pointers, and not all initialised:
//   PyTorch's elementwise kernels pass fixed-size arrays of which only the first entries
//   are set, and the rest keep whatever the host stack held, which in a planned iteration
//   is often the address the engine itself just evicted (its eviction code ran on the same
//   thread just before). On an H200 (session 28) such a word in GPT-2's forward pointed
//   into the dropout output evicted one launch earlier; the net tried to regenerate it
//   with a recipe whose last launch had not run yet, failed, and the block's pages were
//   mapped back holding no valid bytes: the loss was NaN from the next iteration on.
// Approach: while an iteration follows its trace, a kernel's word counts only if the
//   traced launch at the same position held a pointer into the same buffer at the same
//   parameter offset (the analysis keeps every such touch). Others are left alone and
//   counted (iteration_report::stray_pointers; at SUBLINEAR_LOG=debug each is named). A
//   buffer the plan or the pressure valve evicts is always needed through a word the
//   trace saw, so both still come back at their next use. Memory copies and sets, and
//   every launch once an iteration has diverged, are followed word for word as before.
// Limitations: a program whose pointers change between iterations with the same kernels
//   and the same allocation sizes (data-dependent choice of an operand) is not caught by
//   the divergence check, and now not by the safety net either: that program was never
//   plannable from one trace.
#pragma once

#include <cstddef>
#include <limits>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "runtime/settings.hpp"
#include "tracer/events.hpp"
#include "tracer/recorder.hpp"

namespace sublinear::policy {
struct iteration;
}  // namespace sublinear::policy

namespace sublinear::runtime {

// One operation as the engine sees it at ENTER/EXIT: a kernel, a copy or a set.
struct launch_view {
  enum class kind : std::uint8_t { kernel, memcpy, memset };
  kind what = kind::kernel;
  std::uint64_t kernel_handle = 0;  // the device's handle (host: kernel id)
  tracer::dims grid, block;
  std::uint32_t shared_mem = 0;
  device::stream_handle stream = nullptr;
  std::span<const std::byte> params;  // kernels: the packed parameter block
  void* dst = nullptr;                // copies and sets
  const void* src = nullptr;
  std::size_t bytes = 0;
  int value = 0;
};

// What the engine needs from a device to regenerate buffers. Work queued through it is
// not intercepted by the engine or the tracer.
class replay_device {
 public:
  virtual ~replay_device() = default;
  // Queues `op` (as recorded, with its possibly rewritten parameters) on `stream`.
  virtual void replay(const launch_view& op, device::stream_handle stream) = 0;
  // Copies device bytes into host memory, waiting for `stream`'s work first (validation).
  virtual void download(void* host_dst, const void* device_src, std::size_t bytes,
                        device::stream_handle stream) = 0;
  // Copies host bytes into device memory and waits for it (validation repairs).
  virtual void upload(void* device_dst, const void* host_src, std::size_t bytes,
                      device::stream_handle stream) = 0;
  // Queues a device-to-device copy on `stream` (scratch copies of side outputs).
  virtual void copy(void* dst, const void* src, std::size_t bytes, device::stream_handle stream) = 0;
  // Sets `bytes` at `dst` to `value` on `stream` and waits for it, so that work on any
  // stream afterwards sees the bytes (Note [Filled fresh blocks] in tracer/block_hashes.hpp).
  virtual void fill(void* dst, std::uint8_t value, std::size_t bytes, device::stream_handle stream) = 0;
  // Monotonic seconds, for recompute-time accounting.
  virtual double now_s() = 0;
};

enum class engine_state : std::uint8_t { trace, validate, steady, disabled };
const char* to_string(engine_state s) noexcept;

// Figures for one finished iteration.
struct iteration_report {
  std::size_t index = 0;
  engine_state state = engine_state::trace;
  std::size_t peak_mapped = 0;
  std::size_t budget = 0;
  std::size_t evictions = 0;
  std::size_t evicted_bytes = 0;
  std::size_t recomputed_launches = 0;
  double recompute_s = 0.0;         // host time spent queuing replays (device time on GPU)
  double stall_s = 0.0;             // time launches waited for regeneration at ENTER
  double engine_s = 0.0;            // host time inside the engine's hooks (launch interception, allocation,
                                    // free), recipes and stalls included: what the engine itself costs
  std::size_t prefetched = 0;       // regenerations done ahead of their restore point
  std::size_t pressure_evictions = 0;  // unplanned evictions by the pressure valve
  std::size_t kept_resident = 0;    // planned evictions not made: no room for the buffer's own pages, so
                                    // the allocator placed it in a shared segment (Note [Pressure valve])
  std::size_t stray_pointers = 0;   // parameter words pointing into an evicted block where the traced
                                    // launch held no pointer to it: left alone (Note [Stray pointer words])
  std::size_t retained = 0;         // frees the engine deferred so recipes read the block in place
                                    // (Note [Retention] in policy/retention.hpp)
  std::size_t offloads = 0;         // blocks copied to host memory and evicted (traced iterations)
  std::size_t offloaded_bytes = 0;  // their bytes
  std::size_t offload_restores = 0;  // offloaded blocks brought back for a launch
  std::size_t allocator_waits = 0;  // times the allocator waited for a stream to make room (budget and
                                    // release waits: each one drains that stream's queue)
  std::size_t handoffs = 0;         // mappings that took a chunk still in use by queued work of their
                                    // stream instead of waiting (Note [Stream-ordered handoff])
  std::size_t packed = 0;           // planned buffers placed in a pack's shared pages (Note [Packs])
  bool budget_lifted = false;       // a plan made with the scaled cache allowance ran out of room and the
                                    // rest of this iteration ran without the budget (Note [Scaled cache allowance])
  bool diverged = false;
  std::string divergence;           // why it diverged: the first event that differed from the trace
  std::size_t validation_mismatches = 0;
  double wall_s = 0.0;
};

// Per evicted buffer, over the whole run.
struct eviction_record {
  std::size_t size = 0;
  std::string producer;             // kernel name of its first writer
  std::size_t times_evicted = 0;
  std::size_t times_recomputed = 0;
  double recompute_cost_s = 0.0;    // planned cost of its recipe, per regeneration
  bool never_evict = false;         // failed validation
};

// One entry of the timeline behind the Chrome trace and the memory plot.
struct timeline_event {
  enum class kind : std::uint8_t {
    memory,      // a sample of mapped and allocated bytes after a launch
    evict,       // a buffer's eviction was requested (bytes: its size)
    regenerate,  // a recipe ran (begin..end: host time spent queuing it)
    iteration,   // an iteration ended (label: its state)
    allocate,    // the program allocated a block (address, bytes)
    release,     // the program freed a block (address, bytes)
  };
  kind what = kind::memory;
  double begin_s = 0.0;  // seconds since the engine started
  double end_s = 0.0;
  std::size_t bytes = 0;
  std::size_t mapped = 0;
  std::size_t allocated = 0;
  std::uintptr_t address = 0;  // allocate, release, evict, regenerate: the block's address
  std::string label;     // producer kernel, state name
};

struct engine_options {
  settings config;                  // budget, policy, validation mode, ...
  std::size_t device_capacity = 0;  // for budgets given as a share of device memory
  bool record_timeline = false;     // keep timeline events (reports, plots)
  std::size_t timeline_limit = 1'000'000;  // events kept at most
  // Launches ahead of a plan's restore point at which regeneration may start when the
  // budget has room (Note [Prefetch]); 0 regenerates at the restore point only.
  std::size_t prefetch_launches = 8;
  // Hold an absolute budget in the traced iterations too, offloading to host memory what
  // does not fit (Note [Offloading the traced iteration]). Off, they run unbudgeted, as
  // a recording for `sublinear plan` does: its preview then matches the runtime's plan.
  bool budget_traced_iterations = true;
  // Fill the blocks handed out while tracing, so that the collectors can tell a block no
  // one wrote from one an unseen writer wrote (Note [Filled fresh blocks] in
  // tracer/block_hashes.hpp). Off only in tests that show what it is for.
  bool fill_fresh_blocks = true;
  // Tests only: multiplies the scaled cache allowance (0 keeps no cache at all back, so a
  // planned iteration runs out of room and the fallback shows).
  double scaled_cache_factor = 1.0;
};

// Note [Planning overhead]
// Rationale: the planners count live bytes (at page granularity for what they evict); the
//   budget limits mapped bytes, which also hold the allocator's cache: free space inside
//   partly used segments, and whole segments nobody asked back. Keeping too much of the
//   budget out of the planner's share costs recomputation and makes small budgets
//   infeasible; keeping too little runs the allocator out of room in a planned iteration,
//   which the pressure valve (Note [Pressure valve]) cannot always relieve, and runs it
//   against the budget more often, which costs time even when the valve succeeds.
// Approach: the share kept back is the cache the traced iteration showed at its peak
//   (mapped bytes minus live bytes as the plans count them, each buffer rounded to 512
//   bytes), one page, and a sixteenth of the budget, for fragmentation the trace cannot
//   show and for prefetches. The page is what a sub-page allocation costs under pressure
//   when no free block fits: a fresh page-sized segment. The sixteenth is capped at the
//   most bytes the traced iteration held in sub-page buffers at once: that fragmentation
//   is of pages that sub-page buffers share (larger blocks get segments of their own size,
//   evicted ones whole pages the plans count), and prefetches wait for room.
// History: until 2026-11-21 the cache was taken against the raw live bytes, which kept
//   each buffer's rounding back twice (2.3 MiB of ResNet-434's 20 MiB budget at 0.5x, for
//   its 9,361 buffers). Counting it once made `sublinear demo` (ResNet-218) run out of
//   memory at a regeneration, one page short, in 6 of 24 runs of a stress (budgets
//   0.4x-0.65x, reforward and chen, three runs at a time), with 1.5-1.9 MiB free inside
//   2 MiB small-pool segments that one live block kept mapped. Small segments now follow
//   the request (Note [Exact small segments] in allocator/detail/block_pool.hpp): the same stress
//   passed 24 of 24 runs twice with the rounding counted once and no pressure event.
// Measured and rejected (docs/runtime.md, "Budget arithmetic"): the traced cache scaled
//   by budget / traced peak, a thirty-second instead of a sixteenth, and a floor of two
//   pages. They let the end-to-end matrix plan 14-20 of 105 cells instead of 12-14, but at
//   the smallest budgets the benchmark sweeps choose an LSTM of 128 steps ran out of
//   memory in a planned iteration (44 KiB short, nothing the valve could evict: the
//   fragmentation of thousands of sub-page buffers does not shrink with the budget).
//   The cap (2026-11-27): on PyTorch's GPT-2 blocks on an H200, with 2 MiB pages, the
//   sub-page buffers held at most 4.46 MiB while the sixteenth of the 362 MiB budget that
//   matched torch.utils.checkpoint's memory was 22.6 MiB, and reforward's smallest budget
//   was 366.97 MiB. Every host workload of `sublinear demo` holds more in sub-page
//   buffers than a sixteenth of its budget, so the cap leaves its arithmetic as measured.
// The engine and `sublinear plan` both plan for `budget - planning_overhead(...)`.
// What the traced iteration showed of memory: its peak of mapped bytes, its peak of live
// bytes as the plans count them (the simulator's peak with nothing evicted) and the
// allocator's page granularity.
struct traced_memory {
  std::size_t mapped_peak = 0;
  std::size_t live_peak = 0;
  std::size_t granularity = 0;
  // The most bytes held at once in buffers smaller than a page (each rounded to 512
  // bytes); the largest value when unknown, which leaves the sixteenth uncapped.
  std::size_t sub_page_peak = std::numeric_limits<std::size_t>::max();
};
[[nodiscard]] traced_memory traced_memory_of(const policy::iteration& graph, std::size_t traced_mapped_peak);

// Note [Scaled cache allowance]
// Rationale: the traced cache (Note [Planning overhead]) is what the allocator held beside
//   the live bytes of an unbudgeted iteration at its peak: mostly blocks and segments it
//   kept because nothing asked for them back. A planned iteration under a small budget
//   runs with a fraction of those live bytes, and the budget's pressure gives idle
//   segments back, so keeping the whole traced cache out of a small budget makes budgets
//   infeasible that hold. DenseNet-121 at batch 32 on the host device: 14.3 MiB of the
//   traced cache kept reforward's smallest budget at 31.5 MiB; planned at 18.5-22 MiB with
//   the cache scaled to the budget, it held the budget and trained bit-identically. Every
//   budget the traced cache admits has held in every stress run since session 11, so it
//   stays the rule there.
// Approach: `traced` keeps the whole traced cache back. Only when the planner finds that
//   share infeasible does the engine plan again with `scaled`: the traced cache times
//   budget / traced mapped peak (at most all of it), the page and the capped sixteenth as
//   before. If a planned iteration of such a plan still runs out of room after the
//   pressure valve and every fallback, the engine lifts the budget for the rest of that
//   iteration (a warning names the shortfall; the iteration's report says
//   `budget_lifted`), plans again with the traced cache, and without a plan runs plain
//   caching, as it would have without the attempt. A plan made with the traced cache
//   never lifts the budget: it fails with out_of_memory as before; nor does a request the
//   device's memory or the address space refused (out_of_memory::cause), which no budget
//   would let through. SUBLINEAR_SCALED_CACHE=0
//   (settings::scaled_cache) refuses such budgets instead.
// Limitations: a budget below the traced cache's smallest is held only as long as its
//   plan does not run out; the time a plan costs is not monotone across that smallest
//   budget (just below it the planner gets more bytes than just above). The scaling is
//   measured, not derived: fragmentation among sub-page buffers does not shrink with the
//   budget (docs/runtime.md, "Budget arithmetic"), which the sixteenth still covers.
enum class cache_allowance_mode : std::uint8_t { traced, scaled };
[[nodiscard]] const char* to_string(cache_allowance_mode m) noexcept;

// The traced cache (what `sublinear plan` adds to a plan's live bytes to predict mapped
// bytes); with `scaled`, that cache times budget / traced mapped peak, at most all of it.
[[nodiscard]] std::size_t cache_allowance(const traced_memory& traced);
[[nodiscard]] std::size_t cache_allowance(const traced_memory& traced, std::size_t budget, cache_allowance_mode mode);
[[nodiscard]] std::size_t planning_overhead(std::size_t budget, const traced_memory& traced,
                                            cache_allowance_mode mode = cache_allowance_mode::traced);
// The smallest budget whose share for the planner (budget - planning_overhead) is at least
// `planner_bytes`: what to tell a user whose budget was infeasible.
[[nodiscard]] std::size_t budget_for_planner_bytes(std::size_t planner_bytes, const traced_memory& traced,
                                                   cache_allowance_mode mode = cache_allowance_mode::traced);

// The allocator settings the engine runs with (`on`; off restores PyTorch's): exact
// segments for large and small requests, so that mapped bytes follow live bytes (Note
// [Exact small segments] in allocator/detail/block_pool.hpp). The engine applies them when it starts
// and lifts them when it stops. A program on the host device that allocates its model
// before starting the engine applies them first, as sublinear's allocator in a real
// process has them from its first allocation: parameters left in a 2 MiB small segment
// cost a budget of a few MiB more than it can spare.
void use_engine_allocator_settings(allocator::caching_allocator& alloc, bool on = true);

class engine final : public allocator::allocation_observer {
 public:
  // The engine installs itself as the allocator's observer (forwarding to the recorder)
  // and starts tracing. `device` replays; both must outlive the engine.
  engine(allocator::caching_allocator& alloc, replay_device& device, tracer::recorder& recorder,
         engine_options options);
  ~engine() override;
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // Interception, called by a collector at launch ENTER and EXIT.
  void before_launch(const launch_view& op);
  void after_launch(const launch_view& op);
  // An iteration boundary (explicit marker).
  void mark_iteration();

  // allocation_observer
  bool place_evictable(std::size_t size, device::stream_handle stream) override;
  std::optional<allocator::pack_slot> pack_slot_for(std::size_t size, device::stream_handle stream) override;
  void on_allocate(void* ptr, std::size_t size, device::stream_handle stream, bool evictable) override;
  void on_free(void* ptr, std::size_t size, device::stream_handle stream) override;
  bool defer_free(void* ptr, std::size_t size, device::stream_handle stream) override;

  [[nodiscard]] engine_state state() const;
  [[nodiscard]] std::vector<iteration_report> iterations() const;
  [[nodiscard]] std::vector<eviction_record> evictions() const;
  [[nodiscard]] std::vector<timeline_event> timeline() const;
  // Why there is no plan, if there is none ("" otherwise): infeasible budget, etc.
  [[nodiscard]] std::string plan_error() const;
  // The budget in bytes the current plan was made for (0: none).
  [[nodiscard]] std::size_t budget() const;
  // Predicted peak of the current plan (0: none).
  [[nodiscard]] std::size_t predicted_peak() const;
  // Launches the current plan replays per iteration (0: none). A planned iteration
  // replays no more unless the pressure valve evicted something (Note [Prefetch]).
  [[nodiscard]] std::size_t planned_recomputed_launches() const;
  // The traced iteration's peak of mapped bytes the last plan's overhead was taken from
  // (Note [Planning overhead]; 0 before any). Under an absolute budget the traced
  // iterations offload, and this is the peak they would have mapped without it, not the
  // peak they mapped: `sublinear plan --mapped-peak` needs this one to make the same plan.
  [[nodiscard]] std::size_t planning_mapped_peak() const;
  // The cache allowance the current plan was made with (Note [Scaled cache allowance]).
  [[nodiscard]] cache_allowance_mode plan_allowance() const;
  // What the current plan recomputes against what any plan must (all zero: no plan).
  struct plan_compute {
    double added_s = 0.0;   // the plan's added compute per iteration (traced durations)
    double floor_s = 0.0;   // the recompute floor at the planner's share of the budget
                            // (Note [Recompute floor] in policy/recompute_floor.hpp)
    double traced_s = 0.0;  // the traced iteration's compute
  };
  [[nodiscard]] plan_compute planned_compute() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace sublinear::runtime
