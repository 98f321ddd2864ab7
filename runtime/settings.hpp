// Every setting sublinear reads, in one table: name, default, accepted forms, one line of
// doc. Parsed once into a `settings` value; a malformed value is a config_error naming the
// variable, the value and the accepted forms, and nothing runs on a guess.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "policy/budget.hpp"
#include "policy/link_model.hpp"
#include "sublinear/error.hpp"

namespace sublinear::runtime {

enum class log_level { error, warn, info, debug };
enum class validate_mode { off, first, always };
enum class iteration_mode { marker, automatic };

struct settings {
  std::optional<policy::budget_spec> budget;  // none: plain caching; parsed once here (policy/budget.hpp)
  std::string policy = "reforward";
  std::string report;              // JSON report path ("" = none)
  log_level log = log_level::warn;
  std::string log_file;            // "" = stderr
  validate_mode validate = validate_mode::first;
  bool retention = true;           // plans may keep freed buffers alive (Note [Retention])
  bool scaled_cache = true;        // below the traced cache's smallest budget, plan with the cache scaled
                                   // to the budget (Note [Scaled cache allowance], policy/planning_overhead.hpp)
  bool multi_pass = true;          // plans may recompute a buffer more than once (Note [Multi-pass], policy/solver_multipass.cpp)
  bool packs = true;               // evicted sub-page buffers share pages (Note [Packs], policy/packs.hpp)
  std::string trace;               // trace file path ("" = none)
  int trace_iterations = 2;        // iterations traced before planning (1 or 2)
  iteration_mode iteration = iteration_mode::marker;
  bool disable = false;            // plain caching, no tracing or eviction
  // Offload (docs/runtime.md, "Offload execution"): keep / recompute / offload choice,
  // the pinned host memory offloads may hold (0: half the host's memory) and the link's
  // bandwidth in bytes/s per direction (0: the device's own, measured or configured).
  policy::offload_mode offload = policy::offload_mode::on;
  bool offload_packs = true;       // offloaded sub-page buffers share one copy (Note [Offload packs])
  std::size_t host_budget = 0;
  double link_to_host = 0.0;
  double link_to_device = 0.0;
  std::size_t planning_threads = 0;  // threads the offload search may use (0: the CPUs the process may run on, at most 8)
  double fetch_margin = 0.25;        // copies back planned with this share of their time to spare (Note [Fetch margin])
};

struct option_info {
  const char* name;           // environment variable
  const char* default_value;  // as written in the environment
  const char* forms;          // accepted forms, for errors and --help
  const char* doc;
  bool boolean = false;       // a yes/no switch: `sublinear run --flag` alone sets it
};

// The table, in documentation order.
const std::vector<option_info>& options_table();

// A lookup for variables: std::getenv by default; tests pass their own.
using env_lookup = std::function<const char*(const char*)>;

// Reads every SUBLINEAR_* variable. Throws config_error on the first malformed value, and
// on an unknown SUBLINEAR_* variable when `environ_names` lists the environment's names
// (a misspelt setting must not be silently ignored).
settings read_settings(const env_lookup& lookup, const std::vector<std::string>& environ_names = {});
settings read_settings_from_environment();

// The budget as the user wrote it ("" when there is none), for messages.
std::string budget_text(const settings& s);

// The effective configuration, one "NAME=value" per line (printed once at debug level).
std::string describe(const settings& s);

// Parsers shared with the command line; each throws config_error naming `what`.
bool parse_bool(const std::string& what, const std::string& value);
log_level parse_log_level(const std::string& what, const std::string& value);
validate_mode parse_validate_mode(const std::string& what, const std::string& value);
// SUBLINEAR_PLANNING_THREADS's form: a whole number from 1 to 64.
std::size_t parse_planning_threads(const std::string& what, const std::string& value);
// SUBLINEAR_FETCH_MARGIN's form: a number from 0 to 4.
double parse_fetch_margin(const std::string& what, const std::string& value);

// The threads the offload search gets (policy::planner::options::threads): `asked`, or
// where it is 0 (the setting left empty) the CPUs this process may run on, at most 8 (its
// affinity mask, which a container's cpuset narrows; not a cgroup's CPU quota).
std::size_t planning_threads(std::size_t asked);

// The options table as a Markdown table (docs/settings.md and README.md embed it; a test
// keeps them equal).
std::string settings_markdown();

// The command-line flag of a setting: SUBLINEAR_TRACE_ITERATIONS -> "--trace-iterations".
std::string flag_name(const option_info& o);
// The setting a flag names ("--trace-iterations" or "trace-iterations"), or nullptr.
const option_info* option_for_flag(std::string_view flag);

// Note [Run environment]
// Rationale: `sublinear run -- CMD` must give CMD exactly the settings the user asked for,
//   plus the variables that load sublinear into it, and refuse before anything runs when
//   a setting is malformed or unknown: the child would otherwise fail later, or run
//   silently without a budget.
// Approach: a pure function from the current environment, the settings given on the
//   command line (they win over the environment's) and the path of the preload /
//   injection library to the child's environment. Every SUBLINEAR_* variable of the result
//   goes through read_settings (malformed values and unknown names throw config_error);
//   LD_PRELOAD gains the library in front (kept once; what was there stays, in order);
//   CUDA_INJECTION64_PATH is set to the library (CUPTI loads one injection library: if
//   another one is set already, that is an error naming it rather than a silent swap).
//   PYTORCH_NO_CUDA_MEMORY_CACHING=1 is added unless the environment has the variable:
//   PyTorch's caching allocator would otherwise serve every tensor from a few large
//   cudaMallocs, and sublinear would see nothing to evict (Note [Hidden allocations]).
// Limitations: the environment is taken as NAME=VALUE strings; an entry without '=' is
//   passed through unchanged.
struct run_environment {
  std::vector<std::string> variables;  // NAME=VALUE, in the order execve takes them
  settings effective;                  // what sublinear will read in the child
};
run_environment compose_run_environment(const std::vector<std::string>& inherited,
                                        const std::vector<std::pair<std::string, std::string>>& overrides,
                                        const std::string& library);

}  // namespace sublinear::runtime
