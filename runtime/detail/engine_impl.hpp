// The replay engine's state (engine::impl) and the shared helpers its methods use. The
// methods live by seam:
//
//   runtime/engine.cpp             the lifecycle (TRACE -> PLAN -> VALIDATE -> STEADY) at
//                                  iteration boundaries, retention, divergence,
//                                  interception at ENTER/EXIT, and the public shell
//   runtime/engine_plan.cpp        the plan from the trace and its per-position index
//   runtime/engine_regenerate.cpp  eviction, regeneration (recipes), validation of what
//                                  they regenerate, the ENTER safety net, prefetch
//   runtime/engine_pressure.cpp    the pressure valve and the budget overrun
//   runtime/engine_offload.cpp     offloading to host memory while tracing
//   runtime/engine_writes.cpp      the hashes that find writes the trace did not see
//
// Type map:
//
//   schedule      : the plan turned into per-position lists (evict after, restore before)
//   live          : per buffer, this iteration's address and whether the engine evicted it
//   saved_op      : a launch of this iteration that some recipe replays, with its bytes
//   backup        : validation's host copy of an evicted buffer
//   uses, writers : per buffer, the traced launches touching / writing it (the valve's
//                   look-ahead, Note [Pressure valve] in runtime/engine_pressure.cpp)
//   tracked_block : per live block under an absolute budget: its last touch while tracing,
//                   its host copy while offloaded (Note [Offloading the traced iteration]
//                   in runtime/engine_offload.cpp)
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "policy/iteration.hpp"
#include "policy/plan.hpp"
#include "policy/planning_overhead.hpp"
#include "runtime/engine.hpp"
#include "runtime/log_output.hpp"
#include "runtime/settings.hpp"
#include "runtime/write_check_work.hpp"
#include "tracer/analysis.hpp"
#include "tracer/events.hpp"
#include "tracer/recorder.hpp"

namespace sublinear::runtime {

// Host memory for the recipe inputs copied at releases (Note [Unseen writes] in
// engine_writes.cpp): one block per buffer, kept across iterations, which copy the same
// buffers, and given back with the engine once the copies queued into it have landed.
class host_copy_store {
 public:
  explicit host_copy_store(replay_device& dev) : dev_(dev) {}
  host_copy_store(const host_copy_store&) = delete;
  host_copy_store& operator=(const host_copy_store&) = delete;
  ~host_copy_store();
  // At least `bytes` for buffer `b`'s next copy, queued on `stream`; nullptr where b's
  // block would have to grow past `limit` bytes held in all, or the host refuses it.
  std::byte* reserve(policy::buffer_id b, std::size_t bytes, std::size_t limit, device::stream_handle stream);
  // A copy into b's block is queued on `stream`.
  void queued(policy::buffer_id b, device::stream_handle stream);
  // Returns once the copy queued into b's block has landed.
  void wait(policy::buffer_id b);
  // The bytes of host memory the blocks hold.
  [[nodiscard]] std::size_t held() const noexcept { return held_; }
  // Gives every block back, once the copies queued into them have landed.
  void release();

 private:
  struct block {
    std::byte* data = nullptr;
    std::size_t capacity = 0;
    bool queued = false;
    device::stream_handle stream = nullptr;
  };
  void free_block(block& blk) noexcept;
  replay_device& dev_;
  std::unordered_map<policy::buffer_id, block> blocks_;
  std::size_t held_ = 0;
};

struct engine::impl {
  using buffer_id = policy::buffer_id;
  using launch_id = policy::launch_id;
  static constexpr std::uint32_t none = policy::none;

  // A launch of this iteration that some recipe replays, with its bytes.
  struct saved_op {
    bool present = false;
    launch_view view;
    std::vector<std::byte> params;  // view.params points here
    std::vector<device::launch_attribute> attributes;  // view.attributes points here
    std::vector<std::uint64_t> input_versions;  // versions of touched buffers at the original launch
  };

  allocator::caching_allocator& alloc;
  replay_device& dev;
  tracer::recorder& rec;
  engine_options opts;
  std::unique_ptr<log_output> log_out;  // SUBLINEAR_LOG's file, or stderr
  allocation_observer* previous_observer = nullptr;

  mutable std::recursive_mutex mutex;
  engine_state st = engine_state::trace;
  std::size_t traced_iterations = 0;  // in the current TRACE phase
  std::size_t iteration_index = 0;
  double iteration_started_s = 0.0;
  double first_call_s = -1.0;  // this iteration's first call into the engine (-1: none yet)

  // ---- the plan -----------------------------------------------------------------------
  bool have_plan = false;
  std::string plan_error;
  // The cache allowance the plan was made with, and whether the scaled one ran out of room
  // in a planned iteration (then only the traced one is tried again; Note [Scaled cache
  // allowance]).
  policy::cache_allowance_mode allowance = policy::cache_allowance_mode::traced;
  bool scaled_refused = false;
  tracer::analysed_iteration an;
  policy::plan plan;
  std::size_t budget_bytes = 0;
  std::vector<std::uint32_t> transient_buffers;          // k-th allocation of an iteration -> buffer
  std::vector<std::uint8_t> buffer_evictable;            // buffer -> placed evictable
  std::vector<std::uint32_t> pack_of;                    // buffer -> plan.packs index, or none (Note [Packs])
  std::vector<std::size_t> pack_offset;                  // buffer -> its offset in that pack
  std::vector<std::vector<std::size_t>> evict_at;        // position -> plan entries
  std::vector<std::vector<std::size_t>> restore_at;      // position -> plan entries
  std::vector<std::int32_t> entry_of;                    // buffer -> plan entry carrying it, or -1
  std::vector<std::uint8_t> saved_needed;                // position -> a recipe replays it
  std::vector<std::uint64_t> expected_handle;            // position -> kernel handle (or ~kind)
  std::unordered_set<std::uint32_t> never_evict_allocs;  // alloc_index values that failed validation
  std::unordered_set<std::string> unreplayable_kernels;  // kernels whose replay the device refused
  std::unordered_set<buffer_id> regenerating;            // targets of the recipes running now
  std::vector<std::pair<std::uint32_t, std::uint32_t>> earlier_writing_slots;  // from earlier traced iterations
  std::vector<std::vector<launch_id>> uses;              // buffer -> launches touching it, ascending
  std::vector<std::vector<launch_id>> writers;           // buffer -> launches writing it, ascending
  // Note [Retention] (policy/retention.hpp): the plan's retentions are applied to
  // an.graph once it is planned; these restore the traced lifetimes before planning again.
  std::vector<std::pair<buffer_id, launch_id>> traced_free_at;
  // Whether the plan retains anything: every free asks defer_free, and without retentions
  // the answer needs no lock.
  std::atomic<bool> retaining{false};
  std::vector<launch_id> retain_until;                   // buffer -> release_before, or none
  std::vector<std::vector<buffer_id>> release_at;        // position -> retained buffers freed there

  // ---- this iteration -------------------------------------------------------------------
  std::size_t pos = 0;
  std::size_t alloc_count = 0;
  bool diverged = false;
  bool restore_all_pending = false;
  bool memory_op_pending = false;
  launch_view pending_op;
  std::vector<char*> addr;                               // buffer -> address this iteration
  std::vector<std::uint8_t> evicted;                     // buffer -> evicted by the engine
  std::vector<std::uint8_t> freed;                       // buffer -> freed this iteration
  std::vector<std::uint8_t> kept_resident;               // buffer -> planned evictable, placed shared this iteration
  std::uint64_t recording_ns_at_begin = 0;               // the recorder's recording time when it began
  std::uint64_t observation_ns_at_begin = 0;             // the recorder's observation time when it began
  std::uint64_t waits_at_begin = 0;                      // the allocator's budget + release waits when it began
  std::uint64_t handoffs_at_begin = 0;                   // and its handoffs
  std::uint64_t vmm_calls_at_begin = 0;                  // the allocator's VMM calls when it began
  std::uint64_t pack_members_at_begin = 0;               // and its pack members
  std::vector<std::uint8_t> held;                        // buffer -> freed by the program, kept by the engine
  std::size_t held_count = 0;                            // of `held`: set now
  std::vector<std::int32_t> active_entry;                // buffer -> the entry that evicted it (dtr may
                                                         // evict a buffer more than once)
  std::unordered_map<const void*, buffer_id> buffer_at;  // live address -> buffer
  std::map<const char*, buffer_id> evicted_ranges;       // for the safety-net scan
  std::vector<saved_op> saved;                           // position -> saved launch
  std::vector<std::uint64_t> version;                    // buffer -> writes so far
  std::vector<launch_id> last_write;                     // buffer -> last launch this iteration that wrote it
  std::vector<std::uint32_t> pins;                       // buffer -> regenerations in progress that need it
  bool prefetching = false;                              // inside prefetch(): the valve stays shut
  std::size_t prefetch_scan = 0;                         // next position whose restores prefetch looks at
  std::unordered_map<buffer_id, std::vector<std::byte>> backups;
  iteration_report current;

  // ---- unseen writes (Note [Unseen writes] in runtime/engine_writes.cpp) -----------------
  struct observation {
    std::uint32_t stamp = 0;          // 2l: just before launch l; 2l + 1: just after it
    std::uint64_t version = 0;        // the buffer's version then
    std::uint32_t engine_writes = 0;  // and the engine's replays touching it so far
    hash_result hash;
  };
  struct pending_check {
    buffer_id buffer = none;
    hash_result expected;  // at its release
    hash_result got;       // once regenerated
  };
  write_check_index check_index;                         // which blocks to hash where, from the plan
  std::vector<std::vector<observation>> observations;    // buffer -> this iteration's hashes, by stamp
  std::vector<std::uint32_t> engine_writes;              // buffer -> replays touching it this iteration
  std::vector<std::uint8_t> unseen_written;              // buffer -> kept: written where the trace saw no write
  std::vector<std::uint8_t> tainted;                     // entry -> what its recipe reads was written unseen
  std::vector<std::uint32_t> released_at;                // buffer -> position of its last release, or none
  std::vector<hash_result> release_hash;  // buffer -> its hash at that release
  std::vector<pending_check> pending_checks;
  // A planned release whose comparison waits for hashes the stream has not reached
  // (Note [Unsettled releases] in runtime/engine_writes.cpp).
  struct unsettled_release {
    buffer_id buffer = none;
    std::size_t entry = 0;          // the plan entry releasing it
    std::size_t carrier = 0;        // the entry whose recipe regenerates it
    launch_id produced = none;      // the recipe's last write of it
    std::vector<std::pair<buffer_id, launch_id>> inputs;  // blocks read in place, with their first reader
    std::vector<hash_result> awaited;  // the hashes the comparison reads that were not ready at the release
  };
  std::deque<unsettled_release> unsettled;              // in release order
  std::vector<std::uint8_t> releasing;                   // buffer -> in `unsettled` (a lookup for the hot paths)
  std::unordered_set<std::uint32_t> warned_unseen;       // alloc_index values warned about
  struct input_copy {
    std::uint64_t version = 0;  // the block's version when copied
    std::uint64_t hash = 0;     // its hash then: what the recipes read
    std::byte* bytes = nullptr;  // the buffer's size, in host_copies; read only after host_copies.wait
  };
  host_copy_store host_copies{dev};  // input copies' memory, kept across iterations
  void uncopied(buffer_id u, std::size_t size);          // no room for u's input copy
  bool warned_uncopied = false;
  std::unordered_map<buffer_id, input_copy> input_copies;  // recipe inputs copied at a release
  std::unordered_map<buffer_id, const input_copy*> read_from_copy;  // the replay running now reads these
  std::size_t kept_unseen = 0;                           // buffers kept this iteration for unseen writes
  std::size_t never_evict_at_begin = 0;                  // never_evict_allocs' size when the iteration began

  // ---- offloading while tracing (Note [Offloading the traced iteration]) ---------------------
  struct tracked_block {
    std::size_t size = 0;  // bytes the program asked for
    device::stream_handle stream = nullptr;
    bool evictable = false;
    bool offloaded = false;
    std::uint64_t last_touch = 0;  // launch_clock of the last launch touching it
    std::vector<std::byte> host;   // its bytes while offloaded
  };
  std::size_t trace_budget_bytes = 0;        // the absolute budget (0: trace unbudgeted)
  std::map<const char*, tracked_block> blocks;  // live blocks, by base (only with trace_budget_bytes)
  std::size_t offloaded_live = 0;            // of `blocks`: offloaded now (traced_offload_bytes)
  std::uint64_t launch_clock = 0;
  bool announcing_live_blocks = false;  // the engine's constructor tells the recorder of them
  std::vector<const char*> entering;         // blocks the launch entering now touches
  std::size_t unoffloaded_peak = 0;          // this iteration's peak had nothing been offloaded
  std::size_t planning_peak = 0;             // the last traced iteration's, for the overhead
  std::size_t plan_mapped_peak = 0;          // what the last make_plan took the overhead from
  engine::plan_compute plan_cost;            // the current plan's added compute and its floor
  engine::plan_time plan_time;               // Note [Predicted iteration time] in iteration_time.hpp

  // ---- offload execution (Note [Offload execution] in runtime/engine_swap.cpp) -------------
  enum class swap_state : std::uint8_t { resident, copying_out, on_host, fetching };
  std::vector<std::vector<std::size_t>> copy_out_after;  // position -> plan.offloads entries copied after it
  std::vector<std::vector<std::size_t>> release_by;      // position -> entries released at the latest before it
  std::vector<std::vector<std::size_t>> fetch_at;        // position -> entries fetched at its ENTER
  std::vector<std::vector<std::size_t>> needed_at;       // position -> entries its stream waits for
  std::vector<std::int32_t> offload_of;                  // buffer -> plan.offloads entry, or -1
  std::vector<std::size_t> host_offset;                  // entry -> its slot in the host pool
  // Offloaded packs (Note [Offload packs] in policy/offload_packs.hpp), per entry: the
  // bytes its copies move and its offset in its carrier's copy (policy::copies_of).
  std::vector<std::size_t> copy_bytes, copy_offset;
  std::vector<std::vector<std::size_t>> riders;          // carrier -> the other entries of its pack
  std::map<replay_device::copy_handle, std::size_t> shared_copies;  // a pack's copy -> entries holding it
  void release_copy_of(std::size_t i);                   // gives entry i's copy back (once no entry holds it)
  struct pack_run {
    std::vector<std::size_t> members;  // entries, in the pack's order
    std::size_t offset = 0, bytes = 0; // where the run's bytes are in the pack, and how many
  };
  [[nodiscard]] std::vector<pack_run> pack_runs(std::size_t c, const std::function<bool(std::size_t)>& in_place) const;
  [[nodiscard]] bool start_pack_offload(std::size_t c, device::stream_handle stream);
  [[nodiscard]] bool fetch_pack(std::size_t c, device::stream_handle stream);
  void fetch_run(std::size_t c, const std::vector<std::size_t>& members, std::size_t offset, std::size_t bytes,
                 device::stream_handle stream);
  std::size_t host_pool_bytes = 0;                       // the pool the plan's slots need
  std::byte* host_pool = nullptr;
  std::vector<swap_state> swap;                          // entry -> this iteration's state
  std::vector<replay_device::copy_handle> swap_copy;     // entry -> its copy in flight, or nullptr
  std::vector<std::size_t> swap_note;                    // entry -> its copy's timeline event, or SIZE_MAX
  void end_swap_note(std::size_t i);                     // the copy is seen complete: its slice ends now
  void begin_swap_note(std::size_t i, timeline_event::kind what);
  std::vector<std::size_t> copying_out;                  // entries whose pages go once their copy is done
  std::map<const char*, std::size_t> swapped_ranges;     // address -> entry, while not resident
  replay_device::link_figures link_at_begin;             // the device's link counters when the iteration began
  void index_offloads();
  void begin_offloads();
  void finish_offloads();
  void start_offload(std::size_t i, device::stream_handle stream);
  void release_offloaded(std::size_t i);
  void poll_offloads();
  void fetch(std::size_t i, device::stream_handle stream);
  void bring_in(std::size_t i, device::stream_handle stream);
  // The offloads whose bytes are not on the device (on the host, or a fetch not yet
  // waited for) and that `recipe` reads: at its first launch touching them.
  [[nodiscard]] std::vector<std::size_t> offloads_a_recipe_reads(const std::vector<launch_id>& recipe) const;
  [[nodiscard]] bool reads_offload_not_back(const std::vector<launch_id>& recipe) const;
  // Brings those buffers back first: `stream` waits for their copies.
  void bring_in_recipe_inputs(const std::vector<launch_id>& recipe, device::stream_handle stream);
  void offloads_before(device::stream_handle stream);
  void fetches_needed(device::stream_handle stream);
  void fetch_touched(const launch_view& op);
  void fetch_everything(device::stream_handle stream);
  void bring_in_all_but_on_host(device::stream_handle stream);  // a divergence under an absolute budget
  void drop_offload(buffer_id b);
  std::size_t offload_under_pressure(std::size_t shortfall);
  // SUBLINEAR_HOST_BUDGET, or half the host's physical memory: it bounds host_held()
  // (Note [Host budget] in runtime/engine_swap.cpp).
  [[nodiscard]] std::size_t host_budget() const;
  // Host memory the engine holds for copies now: the pool, the input copies, the blocks
  // offloaded while tracing; and what the budget leaves beside `besides` of it.
  [[nodiscard]] std::size_t host_held() const;
  [[nodiscard]] std::size_t host_room(std::size_t besides) const;
  void note_host_held();                         // the iteration's host_held_bytes
  std::size_t host_pool_made = 0;                // the largest pool the device made (it keeps it)
  std::size_t traced_offload_bytes = 0;          // blocks offloaded while tracing: host bytes now
  std::string offload_refused;  // why offload is off for the rest of the run ("" while it is not)

  std::vector<iteration_report> reports;
  std::vector<timeline_event> timeline;
  double started_s = 0.0;

  void note(timeline_event::kind what, double begin, std::size_t bytes, std::string label) {
    if (!opts.record_timeline || timeline.size() >= opts.timeline_limit) return;
    auto s = alloc.get_stats();
    timeline_event e;
    e.what = what;
    e.begin_s = begin - started_s;
    e.end_s = dev.now_s() - started_s;
    e.bytes = bytes;
    e.mapped = s.mapped;
    e.allocated = s.allocated;
    e.evicted = s.evicted;
    e.label = std::move(label);
    timeline.push_back(std::move(e));
  }
  // A block's event (allocate, release, evict, regenerate) with its address: the PyTorch
  // memory snapshot is drawn from these (report_snapshot.cpp).
  void note_block(timeline_event::kind what, double begin, const void* address, std::size_t bytes,
                  std::string label) {
    const std::size_t before = timeline.size();
    note(what, begin, bytes, std::move(label));
    if (timeline.size() > before) timeline.back().address = reinterpret_cast<std::uintptr_t>(address);
  }
  std::map<std::uint32_t, eviction_record> records;      // alloc_index -> record
  // The analysed iteration keeps indices into the trace it came from; keep that trace.
  tracer::trace kept_trace;

  impl(allocator::caching_allocator& a, replay_device& d, tracer::recorder& r, engine_options o)
      : alloc(a), dev(d), rec(r), opts(std::move(o)), log_out(std::make_unique<log_output>(opts.config.log_file)) {
    if (opts.config.disable) st = engine_state::disabled;
    iteration_started_s = started_s = dev.now_s();
    if (opts.config.log >= log_level::debug) {
      std::string text = describe(opts.config);
      if (!text.empty() && text.back() == '\n') text.pop_back();
      log_out->write("sublinear: effective configuration:\n" + text);
    }
  }

  // ---- helpers --------------------------------------------------------------------------
  static std::uint64_t handle_of(const launch_view& op) {
    switch (op.what) {
      case launch_view::kind::kernel: return op.kernel_handle;
      case launch_view::kind::memcpy: return ~std::uint64_t{1};
      case launch_view::kind::memset: return ~std::uint64_t{2};
    }
    return 0;
  }
  const policy::iteration& graph() const { return an.graph; }
  void log_info(const std::string& line) const {
    if (opts.config.log >= log_level::info) log_out->write("sublinear: " + line);
  }
  void log_debug(const std::string& line) const {
    if (opts.config.log >= log_level::debug) log_out->write("sublinear: debug: " + line);
  }
  void log_warn(const std::string& line) const {
    if (opts.config.log >= log_level::warn) log_out->write("sublinear: warning: " + line);
  }
  std::string launch_name(launch_id l) const {
    const auto& ev = recorded_event(l);
    return "#" + std::to_string(l) + ":" +
           (ev.kind == tracer::event_kind::launch ? kept_trace.kernels[ev.kernel].name : tracer::to_string(ev.kind));
  }
  const tracer::event& recorded_event(launch_id l) const { return kept_trace.events[an.launch_events[l]]; }
  std::uint64_t kernel_handle(const tracer::event& ev) const { return kept_trace.kernels[ev.kernel].handle; }
  bool active() const { return have_plan && !diverged && (st == engine_state::validate || st == engine_state::steady); }

  eviction_record& record_for(buffer_id b) {
    const auto& buf = graph().buffers[b];
    auto& r = records[buf.alloc_index];
    if (r.size == 0) {
      r.size = buf.size;
      auto p = an.producer.size() > b ? an.producer[b] : none;
      if (p != none) {
        const auto& ev = recorded_event(p);
        r.producer = ev.kind == tracer::event_kind::launch ? kept_trace.kernels[ev.kernel].name
                                                           : tracer::to_string(ev.kind);
      }
    }
    return r;
  }

  // ---- planning (runtime/engine_plan.cpp) -----------------------------------------------
  void log_plan() const;
  void build_plan_from_trace();
  void make_plan(std::size_t traced_peak);
  void index_plan();
  // The prediction for the plan (Note [Predicted iteration time]: from the traced
  // iteration), and a finished steady iteration's measure for the next one.
  void predict_plan_time();
  void measure_host_cost();

  // ---- iteration boundaries, retention, divergence, interception (runtime/engine.cpp) ----
  void begin_iteration();
  void end_iteration();
  std::size_t max_traced_peak() const;
  bool hold(const void* ptr);
  void release_held(launch_id at);
  void forget_freed(const void* ptr);
  void diverge(const std::string& why);
  void flush_memory_op();
  void before(const launch_view& op);
  void after(const launch_view& op);

  // ---- eviction and regeneration (runtime/engine_regenerate.cpp) ------------------------
  void evict(std::size_t entry_index, device::stream_handle stream);
  bool evict_buffer(buffer_id b, std::size_t entry_index, device::stream_handle stream, bool planned);
  void complete_eviction(buffer_id b, std::size_t entry_index);
  void regenerate(std::size_t entry_index, device::stream_handle stream, int depth = 0, bool prefetch = false);
  bool recover_failed_recipe(const std::vector<buffer_id>& pending, const std::string& why,
                             device::stream_handle stream);
  std::vector<launch_id> runnable_recipe(const policy::eviction& e, const std::vector<buffer_id>& targets) const;
  void regenerate_now(std::size_t entry_index, device::stream_handle stream, int depth, bool prefetch);
  void check_versions(launch_id l, const saved_op& so, const std::unordered_set<buffer_id>& regenerated,
                      const std::unordered_set<buffer_id>& temps,
                      const std::unordered_map<buffer_id, std::uint64_t>& recipe_writes) const;
  [[nodiscard]] bool reads(launch_id l, buffer_id u) const;
  [[nodiscard]] std::string kernel_name_of(launch_id l) const;
  void validate_regenerated(buffer_id b, device::stream_handle stream);
  void restore_everything(device::stream_handle stream);
  std::int32_t carrier_of(buffer_id b) const;
  bool traced_touch(std::size_t l, std::size_t offset, buffer_id b) const;
  void regenerate_touched(const launch_view& op);
  bool written_in(buffer_id b, std::size_t from, std::size_t until) const;
  bool recipe_valid(std::size_t i, std::size_t until) const;
  void prefetch(device::stream_handle stream);

  // ---- unseen writes (runtime/engine_writes.cpp) -----------------------------------------
  void reset_write_checks();
  [[nodiscard]] bool touched_between(buffer_id b, std::uint32_t from, std::uint32_t to) const;
  bool observe(buffer_id b, std::uint32_t stamp, device::stream_handle stream);
  void observe_before(const launch_view& op);
  void observe_after(const launch_view& op);
  [[nodiscard]] const observation* first_change(buffer_id b, std::uint32_t from) const;
  enum class release_verdict : std::uint8_t { evict, keep, unsettled };
  release_verdict start_release_check(buffer_id b, std::size_t entry, std::uint32_t stamp,
                                      device::stream_handle stream, unsettled_release& out);
  [[nodiscard]] static bool settled(unsettled_release& r);
  bool finish_release_check(const unsettled_release& r);
  void keep_unseen_written(buffer_id b, std::size_t carrier, const std::string& why);
  std::size_t settle_releases(std::size_t waiting_for);
  void settle_needed_releases(const launch_view& op);
  void keep_input_copies(buffer_id b, std::size_t entry, bool planned, device::stream_handle stream);
  [[nodiscard]] std::string suspects(buffer_id b, std::uint32_t from, std::uint32_t to) const;
  void add_unseen_temporaries(std::size_t entry, const std::vector<buffer_id>& targets,
                              std::unordered_set<buffer_id>& temps) const;
  void isolate_changed_inputs(std::size_t entry, const std::vector<buffer_id>& restored,
                              std::unordered_set<buffer_id>& temps, device::stream_handle stream);
  void check_replay(const std::vector<buffer_id>& restored, device::stream_handle stream);
  void settle_write_checks(bool wait);

  // ---- the pressure valve (runtime/engine_pressure.cpp) ---------------------------------
  std::size_t relieve(std::size_t shortfall);
  bool overrun(const out_of_memory& error);

  // ---- offloading while tracing (runtime/engine_offload.cpp) ----------------------------
  void sample_unoffloaded_peak();
  template <class F>
  void for_blocks_in(std::uintptr_t p, std::size_t bytes, F&& f);
  std::vector<const char*> touched_blocks(const launch_view& op);
  void bring_back(const char* base, device::stream_handle stream);
  void touch_and_restore(const launch_view& op, device::stream_handle stream);
  std::size_t offload(std::size_t shortfall);
  void lift_trace_budget(std::size_t shortfall, std::size_t no_room = 0);
  [[nodiscard]] bool engine_evicted(const char* base) const;
};

}  // namespace sublinear::runtime
