// The report schema, embedded so that `sublinear report` checks what it reads. The text
// is docs/report-schema.json; tests/runtime/report_test.cpp keeps the two equal.
#include "runtime/report/report.hpp"

namespace sublinear::runtime {

std::string_view report_schema() {
  static constexpr std::string_view text = R"schema({
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "urn:sublinear:report-schema:1",
  "title": "sublinear report, schema version 1",
  "description": "What one run of sublinear evicted, recomputed and cost. Written at exit (SUBLINEAR_REPORT) and read by `sublinear report`. Sizes are bytes, times are seconds. docs/reports.md explains every field.",
  "type": "object",
  "required": ["schema", "schema_version", "generator", "run", "settings", "plan", "baseline", "summary", "iterations", "evictions", "timeline"],
  "additionalProperties": false,
  "properties": {
    "schema": {"const": "sublinear-report"},
    "schema_version": {"const": 1},
    "generator": {"type": "string", "description": "The program and version that wrote the report."},
    "run": {
      "type": "object",
      "required": ["model", "device", "granularity_bytes"],
      "additionalProperties": false,
      "properties": {
        "model": {"type": "string", "description": "The workload, or the command that ran."},
        "device": {"type": "string", "description": "host or cuda."},
        "granularity_bytes": {"$ref": "#/$defs/bytes", "description": "The allocator's page size; 0 when unknown."}
      }
    },
    "settings": {
      "type": "object",
      "description": "The effective value of every setting (docs/settings.md), as it would be written in the environment.",
      "additionalProperties": {"type": "string"}
    },
    "plan": {
      "type": "object",
      "required": ["planner", "budget_bytes", "predicted_peak_bytes", "error"],
      "additionalProperties": false,
      "properties": {
        "planner": {"type": "string"},
        "budget_bytes": {"$ref": "#/$defs/bytes", "description": "The budget the plan was made for; 0 without a plan."},
        "predicted_peak_bytes": {"$ref": "#/$defs/bytes", "description": "The simulator's peak for the plan; 0 without a plan."},
        "traced_mapped_peak_bytes": {"$ref": "#/$defs/bytes", "description": "The traced iteration's peak of mapped bytes the planner's share of the budget was computed from (without offloading, under an absolute budget): what `sublinear plan --mapped-peak` takes to make the same plan. 0 when unknown (older reports without it)."},
        "cache_allowance": {"enum": ["traced", "scaled"], "description": "How much of the traced iteration's allocator cache the planner's share of the budget kept back: all of it (traced), or scaled to the budget, tried only where the traced cache left the planner too little (Note [Scaled cache allowance] in policy/planning_overhead.hpp). Absent in older reports: traced."},
        "added_compute_s": {"$ref": "#/$defs/seconds", "description": "The plan's added compute per iteration, from the traced durations; 0 without a plan; absent in older reports (read as 0)."},
        "floor_s": {"$ref": "#/$defs/seconds", "description": "The recompute floor at the planner's share of the budget: no plan the runtime can run adds less compute (Note [Recompute floor] in policy/recompute_floor.hpp); with floor_with_offload, the offload floor: no plan that may also offload adds less time, recompute and stalls (Note [Offload floor]); 0 without a plan; absent in older reports (read as 0)."},
        "floor_with_offload": {"type": "boolean", "description": "floor_s bounds added time over plans that may also offload (the plan was made with offload on and a planner that offloads); absent in older reports (read as false)."},
        "traced_compute_s": {"$ref": "#/$defs/seconds", "description": "The traced iteration's compute (the sum of its launches' traced durations); 0 without a plan; absent in older reports (read as 0)."},
        "planning_s": {"$ref": "#/$defs/seconds", "description": "Wall time the program paused at the iteration marker to make the plan: the traced iteration's analysis, the planner, the floor and the host pool; also when no plan was made; absent in older reports (read as 0)."},
        "offloads": {"$ref": "#/$defs/count", "description": "Buffers the plan copies to host memory and back each iteration (docs/runtime.md, Offload execution); absent in older reports (read as 0)."},
        "offloaded_bytes": {"$ref": "#/$defs/bytes", "description": "Bytes the plan sends over the link each way per iteration; absent in older reports (read as 0)."},
        "host_bytes": {"$ref": "#/$defs/bytes", "description": "The pinned host pool the plan's offload slots take (policy/host_layout.hpp); absent in older reports (read as 0)."},
        "link_busy_s": {"$ref": "#/$defs/seconds", "description": "The simulator's copy time per iteration, both directions; absent in older reports (read as 0)."},
        "predicted_stall_s": {"$ref": "#/$defs/seconds", "description": "The simulator's time consumers wait for fetches per iteration; absent in older reports (read as 0)."},
        "link_to_host_bytes_per_s": {"type": "number", "minimum": 0, "description": "The device->host bandwidth the plan was made for; 0 without a link; absent in older reports."},
        "link_to_device_bytes_per_s": {"type": "number", "minimum": 0, "description": "The host->device bandwidth the plan was made for; 0 without a link; absent in older reports."},
        "link_source": {"type": "string", "description": "Where the link's bandwidth came from: configured (the host copy engine's default), measured (at start, on CUDA), SUBLINEAR_LINK_BANDWIDTH, or synchronous (no copy engine); absent in older reports."},
        "offload_error": {"type": "string", "description": "Why offload was turned off for the run (a host pool over SUBLINEAR_HOST_BUDGET or not to be had); empty otherwise; absent in older reports."},
        "predicted_device_s": {"$ref": "#/$defs/seconds", "description": "The simulator's iteration under the plan, device time only: the traced launches' durations, the recipes' and the predicted copy stalls (Note [Link timeline] in policy/simulator_offload.cpp); 0 without a plan; absent in older reports (read as 0)."},
        "host_s_per_launch": {"$ref": "#/$defs/seconds", "description": "The host's cost per launch measured on the traced iteration the plan was made from: (traced_active_s less the traced durations, traced_observation_s and traced_recording_s) / traced_launches, at least 0 (Note [Predicted iteration time] in runtime/iteration_time.hpp); absent in older reports (read as 0)."},
        "predicted_launches": {"$ref": "#/$defs/count", "description": "Launches a planned iteration runs: the traced iteration's intercepted launches plus the plan's replayed ones; absent in older reports (read as 0)."},
        "predicted_iteration_s": {"$ref": "#/$defs/seconds", "description": "The plan's predicted iteration time: predicted_device_s + host_s_per_launch x predicted_launches + predicted_vmm_s + predicted_check_s; 0 without a plan; absent in older reports (read as 0). Each planned iteration's own prediction is its predicted_s."},
        "traced_active_s": {"$ref": "#/$defs/seconds", "description": "The traced iteration's active_s, that host_s_per_launch comes from; absent in older reports (read as 0)."},
        "traced_observation_s": {"$ref": "#/$defs/seconds", "description": "Of traced_active_s, the write observation (hashing the blocks each launch touches, filling fresh blocks), which a planned iteration does not do; absent in older reports (read as 0)."},
        "traced_recording_s": {"$ref": "#/$defs/seconds", "description": "Of traced_active_s, the collectors' recording of launches on the launching thread, which a planned iteration does not do (0 where a collector does not measure it); absent in older reports (read as 0)."},
        "traced_launches": {"$ref": "#/$defs/count", "description": "The traced iteration's intercepted launches, copies and sets; absent in older reports (read as 0)."},
        "predicted_map_backs": {"$ref": "#/$defs/count", "description": "Blocks a planned iteration maps again that a traced one does not: one per pack and per evicted or offloaded block outside a pack (Note [Predicted iteration time] in runtime/iteration_time.hpp); absent in older reports (read as 0)."},
        "predicted_map_back_bytes": {"$ref": "#/$defs/bytes", "description": "Their bytes, in whole granules; absent in older reports (read as 0)."},
        "predicted_vmm_calls": {"$ref": "#/$defs/count", "description": "The VMM calls predicted for a planned iteration beyond a traced one's: each map-back and the allocation it displaces map, set access and unmap (2 x 3 x predicted_map_backs); compare iterations[].vmm_calls; absent in older reports (read as 0)."},
        "predicted_vmm_s": {"$ref": "#/$defs/seconds", "description": "Their host time in predicted_iteration_s: vmm_cycle_s x 2 x predicted_map_backs + vmm_byte_s x 2 x predicted_map_back_bytes (0 with an injected host cost); absent in older reports (read as 0)."},
        "vmm_cycle_s": {"$ref": "#/$defs/seconds", "description": "The probed device's host time per map, set access and unmap cycle, whatever its size (Note [VMM cost probe] in device/vmm_cost_probe.hpp); absent in older reports (read as 0)."},
        "vmm_byte_s": {"$ref": "#/$defs/seconds", "description": "The probed device's host time per byte mapped; absent in older reports (read as 0)."},
        "vmm_probe": {"type": "string", "description": "The device whose VMM costs were probed (host, cuda), 'failed: ' and why, or empty without a probe; absent in older reports."},
        "predicted_hashes": {"$ref": "#/$defs/count", "description": "Hashes the engine's write checks take in a planned iteration, counted from the plan (Note [Write check work] in runtime/write_check_work.hpp); absent in older reports (read as 0)."},
        "predicted_hashed_bytes": {"$ref": "#/$defs/bytes", "description": "Their bytes; compare iterations[].hashed_bytes; absent in older reports (read as 0)."},
        "predicted_check_waits": {"$ref": "#/$defs/count", "description": "Times the checks make the host wait for the stream in a planned iteration that runs as planned (an input hashed again before a replay, an input copied at a release; releases compare once the stream gets there); absent in older reports (read as 0)."},
        "predicted_input_copy_bytes": {"$ref": "#/$defs/bytes", "description": "Recipe inputs copied to host memory at releases; compare iterations[].copied_bytes; absent in older reports (read as 0)."},
        "predicted_check_s": {"$ref": "#/$defs/seconds", "description": "Their time in predicted_iteration_s: hash_issue_s x (hashes + copies) + hash_wait_s x waits + hash_byte_s x (hashed and copied bytes) (0 with an injected host cost); absent in older reports (read as 0)."},
        "hash_issue_s": {"$ref": "#/$defs/seconds", "description": "The probed device's host time to queue one hash (all of it where a hash waits for the stream); absent in older reports (read as 0)."},
        "hash_wait_s": {"$ref": "#/$defs/seconds", "description": "The probed device's time to wait for a hash just queued on an idle stream, beyond queuing it; absent in older reports (read as 0)."},
        "hash_byte_s": {"$ref": "#/$defs/seconds", "description": "The probed device's time per byte hashed; absent in older reports (read as 0)."},
        "hash_probe": {"type": "string", "description": "The device whose hash cost was probed (host, cuda) and where it hashes ('cuda, hashed on the GPU'; 'cuda, copied to the host and hashed there: ' and why not on the GPU), 'failed: ' and why, or empty without a probe; absent in older reports."},
        "error": {"type": "string", "description": "Why there is no plan (an infeasible budget names the smallest feasible one); empty when there is one."}
      }
    },
    "baseline": {
      "description": "The same workload without a budget, when the writer ran it; null otherwise (the traced iteration then serves as the baseline).",
      "type": ["object", "null"],
      "required": ["peak_mapped_bytes", "iteration_s"],
      "additionalProperties": false,
      "properties": {
        "peak_mapped_bytes": {"$ref": "#/$defs/bytes"},
        "iteration_s": {"$ref": "#/$defs/seconds"}
      }
    },
    "summary": {
      "type": "object",
      "required": ["iterations", "planned_iterations", "traced_peak_bytes", "budgeted_peak_bytes", "within_budget", "evictions", "evicted_bytes", "recomputed_launches", "recompute_s", "stall_s", "diverged_iterations", "validation_mismatches"],
      "additionalProperties": false,
      "properties": {
        "iterations": {"$ref": "#/$defs/count"},
        "planned_iterations": {"$ref": "#/$defs/count", "description": "Iterations run under a plan (validate or steady)."},
        "traced_peak_bytes": {"$ref": "#/$defs/bytes", "description": "Largest peak of mapped bytes in a traced iteration."},
        "budgeted_peak_bytes": {"$ref": "#/$defs/bytes", "description": "Largest peak of mapped bytes in a planned iteration."},
        "within_budget": {"type": "boolean", "description": "Every iteration that had a budget (planned ones, and traced ones under an absolute budget) peaked at most at it."},
        "evictions": {"$ref": "#/$defs/count"},
        "evicted_bytes": {"$ref": "#/$defs/bytes"},
        "recomputed_launches": {"$ref": "#/$defs/count"},
        "recompute_s": {"$ref": "#/$defs/seconds"},
        "stall_s": {"$ref": "#/$defs/seconds"},
        "diverged_iterations": {"$ref": "#/$defs/count"},
        "validation_mismatches": {"$ref": "#/$defs/count"}
      }
    },
    "iterations": {
      "type": "array",
      "items": {
        "type": "object",
        "required": ["index", "state", "peak_mapped_bytes", "budget_bytes", "evictions", "evicted_bytes", "recomputed_launches", "recompute_s", "stall_s", "diverged", "validation_mismatches", "wall_s"],
        "additionalProperties": false,
        "properties": {
          "index": {"$ref": "#/$defs/count"},
          "state": {"$ref": "#/$defs/state"},
          "peak_mapped_bytes": {"$ref": "#/$defs/bytes"},
          "budget_bytes": {"$ref": "#/$defs/bytes", "description": "0: no budget in force."},
          "evictions": {"$ref": "#/$defs/count"},
          "evicted_bytes": {"$ref": "#/$defs/bytes"},
          "recomputed_launches": {"$ref": "#/$defs/count"},
          "recompute_s": {"$ref": "#/$defs/seconds", "description": "Cost of the replayed launches (their measured durations in the traced iteration)."},
          "stall_s": {"$ref": "#/$defs/seconds", "description": "Time launches waited at entry while the engine queued regenerations."},
          "prefetched": {"$ref": "#/$defs/count", "description": "Regenerations done ahead of the launch that needed them."},
          "pressure_evictions": {"$ref": "#/$defs/count", "description": "Evictions the plan did not foresee, made by the pressure valve."},
          "kept_resident": {"$ref": "#/$defs/count", "description": "Planned evictions not made: the buffer found no room for pages of its own (under the budget, or on the device) and was placed in a shared segment, resident for the iteration."},
          "stray_pointers": {"$ref": "#/$defs/count", "description": "Kernel parameter words that pointed into an evicted block where the traced launch at that position held no pointer to that block (uninitialised fields keeping old addresses): left alone, nothing regenerated."},
          "unseen_writes": {"$ref": "#/$defs/count", "description": "Writes the trace did not see, found (data-dependent writes): a buffer, or a block its recipe reads in place, changed after it was produced or read, and the buffer was kept resident at its release (never evicted again), or a replay read the input from the copy kept at the release. Optional when read."},
          "hashed_bytes": {"$ref": "#/$defs/bytes", "description": "Bytes hashed in this iteration to find writes the trace did not see (Note [Unseen writes]). Optional when read."},
          "copied_bytes": {"$ref": "#/$defs/bytes", "description": "Bytes of recipe inputs copied to host memory at a release because a kernel touches them before the regeneration; a replay reads the copy if that kernel changed the input unseen (Note [Unseen writes]). Optional when read."},
          "uncopied_bytes": {"$ref": "#/$defs/bytes", "description": "Bytes of such recipe inputs not copied: the host budget (SUBLINEAR_HOST_BUDGET) had no room for them; an unseen write to one before its replay stops the run instead of being undone (Note [Host budget]). Optional when read."},
          "host_held_bytes": {"$ref": "#/$defs/bytes", "description": "The most host memory the engine held for copies at once in this iteration: the offloads' pool, the recipe inputs' copies and the blocks offloaded while tracing; at most the host budget (Note [Host budget]). Optional when read."},
          "check_waits": {"$ref": "#/$defs/count", "description": "Times the checks for unseen writes made the host wait for the stream in this iteration: a replay whose inputs are hashed again, a release that copies inputs to host memory on a device that copies at once (what plan.predicted_check_waits counts). Optional when read."},
          "settle_waits": {"$ref": "#/$defs/count", "description": "Times the host waited for a release's hashes the stream had not reached: a queued release whose buffer, or a recipe reading it, was needed first, and the pressure valve's releases (Note [Unsettled releases]); 0 where the stream keeps up. Optional when read."},
          "retained": {"$ref": "#/$defs/count", "description": "Frees of the program the engine deferred so that recipes read the block in place (retentions of the plan)."},
          "offloads": {"$ref": "#/$defs/count", "description": "Blocks copied to host memory and evicted while tracing under an absolute budget."},
          "offloaded_bytes": {"$ref": "#/$defs/bytes"},
          "offload_restores": {"$ref": "#/$defs/count", "description": "Offloaded blocks brought back for a launch, copy or set."},
          "fetches": {"$ref": "#/$defs/count", "description": "Planned offloads copied back to the device, buffers (offloads and offloaded_bytes count the buffers copied out). Absent in older reports (read as 0)."},
          "fetched_bytes": {"$ref": "#/$defs/bytes", "description": "Their bytes. Absent in older reports (read as 0)."},
          "link_copies": {"$ref": "#/$defs/count", "description": "Copies queued over the link, both ways: one per buffer, or one for all the members of an offloaded pack (Note [Offload packs]). Absent in older reports (read as 0)."},
          "safety_fetches": {"$ref": "#/$defs/count", "description": "Of fetches: a launch, copy or set touched an offloaded buffer outside the plan. Absent in older reports (read as 0)."},
          "failed_copies": {"$ref": "#/$defs/count", "description": "Copies the device refused: the buffer stayed resident, or came back by a synchronous copy. Absent in older reports (read as 0)."},
          "link_busy_s": {"$ref": "#/$defs/seconds", "description": "Time the link spent copying in this iteration, both directions. Absent in older reports (read as 0)."},
          "copy_stall_s": {"$ref": "#/$defs/seconds", "description": "Time compute streams waited for fetches not yet done. Absent in older reports (read as 0)."},
          "release_wait_s": {"$ref": "#/$defs/seconds", "description": "Time the host waited at release points for copies to host memory not yet done. Absent in older reports (read as 0)."},
          "allocator_waits": {"$ref": "#/$defs/count", "description": "Times the allocator waited for a stream to make room under the budget (each drains that stream's queue)."},
          "handoffs": {"$ref": "#/$defs/count", "description": "Mappings that took a chunk still in use by queued work of their own stream instead of waiting for it (stream-ordered handoff)."},
          "packed": {"$ref": "#/$defs/count", "description": "Planned buffers placed in a pack: shared pages with other evicted buffers of their recipe, mapped while any of them is resident. Absent in older reports (read as 0)."},
          "budget_lifted": {"type": "boolean", "description": "A plan made with the scaled cache allowance ran out of room in this iteration after the pressure valve: the rest of the iteration ran without the budget (its peak may exceed it) and the engine planned again with the whole traced cache. Absent in older reports."},
          "diverged": {"type": "boolean", "description": "The iteration differed from the trace; everything was restored and the next iteration is traced again."},
          "divergence": {"type": "string", "description": "Present when diverged: the first event that differed from the trace."},
          "validation_mismatches": {"$ref": "#/$defs/count"},
          "engine_s": {"$ref": "#/$defs/seconds", "description": "Host time inside the engine's hooks (launch interception, allocation and free callbacks), recipes and stalls included: what the engine itself costs the iteration. Absent in older reports."},
          "launches": {"$ref": "#/$defs/count", "description": "Launches, copies and sets the engine intercepted in this iteration. Absent in older reports."},
          "launch_hooks_s": {"$ref": "#/$defs/seconds", "description": "Host time inside the engine's launch ENTER and EXIT hooks in this iteration. Absent in older reports."},
          "launch_hook_ns": {"type": "number", "minimum": 0, "description": "Host nanoseconds inside the engine's launch ENTER and EXIT hooks per intercepted launch (recipes and stalls included): the engine's share of the interception cost. Absent in older reports."},
          "vmm_calls": {"$ref": "#/$defs/count", "description": "The allocator's VMM calls in this iteration (create, map, set access, unmap, release). Absent in older reports."},
          "wall_s": {"$ref": "#/$defs/seconds", "description": "Host time from the previous iteration's end to this one's."},
          "active_s": {"$ref": "#/$defs/seconds", "description": "Host time from the iteration's first call into the engine (an allocation or a launch) to its end: wall_s less the program's time before it (a data loader, a paired twin's turn); 0 when it made none. Absent in older reports (read as 0)."},
          "predicted_s": {"$ref": "#/$defs/seconds", "description": "The iteration's time as predicted before it began: the plan's device time + the host's cost per launch, from the last steady iteration that ran the plan undiverged, or the traced iteration before any (Note [Predicted iteration time] in runtime/iteration_time.hpp); 0 for traced iterations and without a plan. Compare with active_s. Absent in older reports (read as 0)."}
        }
      }
    },
    "evictions": {
      "type": "array",
      "description": "One entry per buffer the engine evicted at least once, over the whole run.",
      "items": {
        "type": "object",
        "required": ["size_bytes", "producer", "times_evicted", "times_recomputed", "recompute_cost_s", "never_evict"],
        "additionalProperties": false,
        "properties": {
          "size_bytes": {"$ref": "#/$defs/bytes"},
          "producer": {"type": "string", "description": "The kernel that first wrote the buffer."},
          "times_evicted": {"$ref": "#/$defs/count"},
          "times_recomputed": {"$ref": "#/$defs/count"},
          "recompute_cost_s": {"$ref": "#/$defs/seconds", "description": "Cost of one regeneration (its recipe's launches)."},
          "never_evict": {"type": "boolean", "description": "Its regeneration failed validation; it is no longer evicted."}
        }
      }
    },
    "timeline": {
      "type": "object",
      "required": ["events", "dropped_repeats"],
      "additionalProperties": false,
      "properties": {
        "dropped_repeats": {"$ref": "#/$defs/count", "description": "Memory samples left out because they repeated the previous sample of their iteration."},
        "events": {
          "type": "array",
          "items": {
            "type": "object",
            "required": ["kind", "iteration", "begin_s", "end_s"],
            "additionalProperties": false,
            "properties": {
              "kind": {"enum": ["memory", "evict", "regenerate", "iteration", "allocate", "release", "offload", "fetch"]},
              "iteration": {"$ref": "#/$defs/count", "description": "The iteration the event belongs to."},
              "begin_s": {"$ref": "#/$defs/seconds", "description": "Seconds since the engine started."},
              "end_s": {"$ref": "#/$defs/seconds"},
              "launch": {"$ref": "#/$defs/count", "description": "memory, evict and regenerate: launches completed in the iteration when it happened."},
              "bytes": {"$ref": "#/$defs/bytes", "description": "evict and regenerate: the buffers' size; iteration: its peak of mapped bytes."},
              "mapped_bytes": {"$ref": "#/$defs/bytes"},
              "allocated_bytes": {"$ref": "#/$defs/bytes"},
              "evicted_bytes": {"$ref": "#/$defs/bytes", "description": "memory: of allocated_bytes, the bytes of live blocks whose pages are given back."},
              "label": {"type": "string", "description": "evict and regenerate: the producer kernel; iteration: its state."},
              "address": {"$ref": "#/$defs/bytes", "description": "allocate, release, evict and regenerate: the block's device address."}
            }
          }
        }
      }
    }
  },
  "$defs": {
    "bytes": {"type": "integer", "minimum": 0, "maximum": 9007199254740992, "description": "At most 2^53: JSON numbers are exact up to there."},
    "count": {"type": "integer", "minimum": 0, "maximum": 9007199254740992},
    "seconds": {"type": "number", "minimum": 0, "maximum": 1000000000, "description": "At most 10^9 (about 32 years)."},
    "state": {"enum": ["trace", "validate", "steady", "disabled"]}
  }
}
)schema";
  return text;
}

}  // namespace sublinear::runtime
