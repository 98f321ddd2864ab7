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
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "policy/planning_overhead.hpp"
#include "runtime/engine_types.hpp"

namespace sublinear::tracer {
class recorder;
}  // namespace sublinear::tracer

namespace sublinear::runtime {

// The allocator settings the engine runs with (`on`; off restores PyTorch's): exact
// segments for large and small requests, so that mapped bytes follow live bytes (Note
// [Exact small segments] in caching_allocator.cpp). The engine applies them when it starts
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
  [[nodiscard]] policy::cache_allowance_mode plan_allowance() const;
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
