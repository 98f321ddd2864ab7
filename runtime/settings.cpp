#include "runtime/settings.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iterator>
#include <sstream>
#include <string_view>
#include <thread>

#include <sched.h>

#include "common/text.hpp"
#include "policy/budget.hpp"
#include "policy/planner.hpp"

extern char** environ;

namespace sublinear::runtime {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

[[noreturn]] void bad(const std::string& what, const std::string& value, const std::string& forms) {
  throw config_error("sublinear: " + what + "=" + quote_bounded(value) + " is not valid; accepted: " + forms);
}

using setter = void (*)(settings&, const std::string& name, const std::string& value);

struct entry {
  option_info info;
  setter set;
};

const std::vector<entry>& entries() {
  static const std::vector<entry> table = {
      {{"SUBLINEAR_BUDGET", "", "bytes with a unit (8GiB, 512MiB, 1.5GB, 1048576), a share of device memory (60%), or a multiple of the traced peak (0.5x)",
        "Strict limit on mapped device memory; empty means no budget (plain caching).", false},
       [](settings& s, const std::string& n, const std::string& v) {
         try {
           s.budget = policy::parse_budget(v);  // the one parse; resolved to bytes at plan time
         } catch (const config_error& e) {
           std::string why = e.what();
           if (why.rfind("sublinear: ", 0) == 0) why = why.substr(11);  // one prefix is enough
           // The value once: here, not again in the parser's "invalid budget '...': ".
           if (const std::string again = "invalid budget " + quote_bounded(v) + ": "; why.rfind(again, 0) == 0) {
             why = why.substr(again.size());
           }
           throw config_error("sublinear: " + n + "=" + quote_bounded(v) + ": " + why);
         }
       }},
      {{"SUBLINEAR_POLICY", "reforward", "none, sqrtn, chen, chain, tiered, reforward, greedy, dtr",
        "The planner that chooses what to evict.", false},
       [](settings& s, const std::string& n, const std::string& v) {
         const auto names = policy::planner_names();
         if (std::find(names.begin(), names.end(), std::string_view(v)) == names.end()) {
           std::string forms;
           for (const auto& p : names) forms += (forms.empty() ? "" : ", ") + std::string(p);
           bad(n, v, forms);
         }
         s.policy = v;
       }},
      {{"SUBLINEAR_REPORT", "", "a file path", "Write the JSON report there at exit.", false},
       [](settings& s, const std::string&, const std::string& v) { s.report = v; }},
      {{"SUBLINEAR_LOG", "warn", "error, warn, info, debug, optionally followed by :PATH (info:/tmp/sublinear.log)",
        "Log level (info prints one line per iteration; debug prints the effective configuration once) and log file.", false},
       [](settings& s, const std::string& n, const std::string& v) {
         const auto colon = v.find(':');
         try {
           s.log = parse_log_level(n, v.substr(0, colon));
         } catch (const config_error&) {
           bad(n, v, "error, warn, info, debug, optionally followed by :PATH");  // name the whole value
         }
         if (colon != std::string::npos) {
           s.log_file = v.substr(colon + 1);
           if (s.log_file.empty()) bad(n, v, "a level followed by a non-empty path after ':'");
         }
       }},
      {{"SUBLINEAR_VALIDATE", "first", "off, first, always",
        "Hash every regenerated buffer and compare with the original: never, in the first iterations with evictions, or always.", false},
       [](settings& s, const std::string& n, const std::string& v) { s.validate = parse_validate_mode(n, v); }},
      {{"SUBLINEAR_RETENTION", "1", "1/true/yes/on or 0/false/no/off",
        "Let plans keep small buffers the program frees alive until recipes have read them (docs/policy.md, \"Retention\"); 0 plans drop sets only.", true},
       [](settings& s, const std::string& n, const std::string& v) { s.retention = parse_bool(n, v); }},
      {{"SUBLINEAR_MULTIPASS", "1", "1/true/yes/on or 0/false/no/off",
        "Below every single-recomputation plan, let chain and reforward plan schedules that recompute some buffers more than once (two-level grids and Rotor-style multi-level schedules, docs/policy.md, \"Multi-pass\"); 0 refuses such budgets.", true},
       [](settings& s, const std::string& n, const std::string& v) { s.multi_pass = parse_bool(n, v); }},
      {{"SUBLINEAR_PACKS", "1", "1/true/yes/on or 0/false/no/off",
        "Let evicted buffers of at most half a page that one recipe regenerates share pages, mapped while any of them is resident (docs/policy.md, \"Packs\"); 0 gives each its own pages.", true},
       [](settings& s, const std::string& n, const std::string& v) { s.packs = parse_bool(n, v); }},
      {{"SUBLINEAR_SCALED_CACHE", "1", "1/true/yes/on or 0/false/no/off",
        "Below the smallest budget that keeping the traced allocator cache back allows, plan with that cache scaled to the budget; a planned iteration that still runs out of room finishes without the budget and sublinear falls back (docs/runtime.md, \"Budget arithmetic\"); 0 refuses such budgets.", true},
       [](settings& s, const std::string& n, const std::string& v) { s.scaled_cache = parse_bool(n, v); }},
      {{"SUBLINEAR_OFFLOAD", "auto", "auto, off, only",
        "Let plans copy activations to host memory and back while the device computes: auto lets the planner choose keep, recompute or offload per buffer, off recomputes only, only never recomputes (docs/runtime.md, \"Offload execution\").", false},
       [](settings& s, const std::string& n, const std::string& v) {
         const std::string l = lower(v);
         if (l == "auto") {
           s.offload = policy::offload_mode::on;
         } else if (l == "off") {
           s.offload = policy::offload_mode::off;
         } else if (l == "only") {
           s.offload = policy::offload_mode::only;
         } else {
           bad(n, v, "auto, off, only");
         }
       }},
      {{"SUBLINEAR_OFFLOAD_PACKS", "1", "1/true/yes/on or 0/false/no/off",
        "Let offloaded buffers of at most half a page share pages and move in one copy each way (docs/offload.md, \"Offload packs\"); 0 copies each on its own.", true},
       [](settings& s, const std::string& n, const std::string& v) { s.offload_packs = parse_bool(n, v); }},
      {{"SUBLINEAR_FETCH_MARGIN", "0.25", "a number from 0 to 4",
        "Plan each copy back from host memory to be done as if it took 1 + this times its modelled time, where the budget has room to fetch it that early, so that a slower link or faster compute than the trace's does not stall the stream (docs/offload.md, \"Fetch margin\"); 0 fetches each as late as the link model allows.", false},
       [](settings& s, const std::string& n, const std::string& v) { s.fetch_margin = parse_fetch_margin(n, v); }},
      {{"SUBLINEAR_HOST_BUDGET", "", "bytes with a unit (16GiB, 512MiB, 1048576)",
        "Host memory (pinned on CUDA) the engine may hold for copies at once: the offloads' pool (docs/offload.md, \"The "
        "host pool layout\"), the copies of recipe inputs and the blocks offloaded while tracing (docs/runtime.md, \"Host "
        "budget\"); empty means half the host's physical memory.", false},
       [](settings& s, const std::string& n, const std::string& v) {
         std::size_t bytes = 0;
         try {
           const policy::budget_spec spec = policy::parse_budget(v);
           if (spec.form != policy::budget_spec::kind::bytes) bad(n, v, "bytes with a unit (16GiB, 512MiB, 1048576)");
           bytes = policy::resolve_budget(spec, 0, 0);
         } catch (const config_error&) {
           char* end = nullptr;
           const double x = std::strtod(v.c_str(), &end);
           if (end != v.c_str() && x == 0.0) bytes = 0;  // "0", "0GiB": said below
           else bad(n, v, "bytes with a unit (16GiB, 512MiB, 1048576)");
         }
         if (bytes == 0) bad(n, v, "a positive size (set SUBLINEAR_OFFLOAD=off for no offload)");
         s.host_budget = bytes;
       }},
      {{"SUBLINEAR_LINK_BANDWIDTH", "", "GB/s, one value for both directions or to-host,to-device (50 or 52.8,35.2)",
        "The device<->host link's bandwidth for offload; empty means the device's own (measured at start on CUDA, the host copy engine's configured rate on the host device).", false},
       [](settings& s, const std::string& n, const std::string& v) {
         const std::string forms = "GB/s, one positive number for both directions or two separated by a comma (to-host,to-device), e.g. 50 or 52.8,35.2";
         auto number = [&](const std::string& t) {
           if (t.empty()) bad(n, v, forms);
           char* end = nullptr;
           const double x = std::strtod(t.c_str(), &end);
           if (end != t.c_str() + t.size() || !(x > 0.0) || x > 1e6) bad(n, v, forms);
           return x * 1e9;
         };
         const auto comma = v.find(',');
         if (comma == std::string::npos) {
           s.link_to_host = s.link_to_device = number(v);
         } else {
           s.link_to_host = number(v.substr(0, comma));
           s.link_to_device = number(v.substr(comma + 1));
         }
       }},
      {{"SUBLINEAR_PLANNING_THREADS", "", "a whole number from 1 to 64",
        "Threads the offload search runs its jobs on (its recompute searches and starts), once, after the traced iterations (docs/offload.md, \"Planning time\"); empty means the CPUs the process may run on, at most 8; the plan is the same for every count.", false},
       [](settings& s, const std::string& n, const std::string& v) { s.planning_threads = parse_planning_threads(n, v); }},
      {{"SUBLINEAR_TRACE", "", "a file path", "Write the traced iterations to this trace file (docs/trace-format.md).", false},
       [](settings& s, const std::string&, const std::string& v) { s.trace = v; }},
      {{"SUBLINEAR_TRACE_ITERATIONS", "2", "1 or 2", "Iterations traced before planning; the second sees writes the first could not (zero-initialised biases).", false},
       [](settings& s, const std::string& n, const std::string& v) {
         if (v != "1" && v != "2") bad(n, v, "1 or 2");
         s.trace_iterations = v[0] - '0';
       }},
      {{"SUBLINEAR_ITERATION", "marker", "marker, auto",
        "Iteration boundaries from an explicit marker (C API, optimizer hook) or detected from the launch sequence.", false},
       [](settings& s, const std::string& n, const std::string& v) {
         std::string l = lower(v);
         if (l == "marker") {
           s.iteration = iteration_mode::marker;
         } else if (l == "auto") {
           s.iteration = iteration_mode::automatic;
         } else {
           bad(n, v, "marker, auto");
         }
       }},
      {{"SUBLINEAR_DISABLE", "0", "1/true/yes/on or 0/false/no/off", "Plain caching allocator: no tracing, no eviction.", true},
       [](settings& s, const std::string& n, const std::string& v) { s.disable = parse_bool(n, v); }},
  };
  return table;
}

}  // namespace

bool parse_bool(const std::string& what, const std::string& value) {
  std::string l = lower(value);
  if (l == "1" || l == "true" || l == "yes" || l == "on") return true;
  if (l == "0" || l == "false" || l == "no" || l == "off") return false;
  bad(what, value, "1, true, yes, on, 0, false, no, off");
}

std::size_t parse_planning_threads(const std::string& what, const std::string& value) {
  char* end = nullptr;
  const long x = value.empty() || value[0] < '0' || value[0] > '9' ? 0 : std::strtol(value.c_str(), &end, 10);
  if (end != value.c_str() + value.size() || x < 1 || x > 64)
    bad(what, value, "a whole number from 1 to 64 (1: plan on the launching thread alone)");
  return static_cast<std::size_t>(x);
}

double parse_fetch_margin(const std::string& what, const std::string& value) {
  // Decimal only: strtod alone would take " 1", "+1", hexadecimal, "nan" and "inf" too.
  const bool decimal = !value.empty() && (std::isdigit(static_cast<unsigned char>(value[0])) != 0 || value[0] == '.') &&
                       value.find_first_of("xX") == std::string::npos;
  char* end = nullptr;
  const double x = decimal ? std::strtod(value.c_str(), &end) : -1.0;
  if (end != value.c_str() + value.size() || !(x >= 0.0) || x > 4.0)
    bad(what, value, "a number from 0 to 4 (0.25: plan each copy back as if it took a quarter longer; 0: as late as the link allows)");
  return x;
}

std::size_t planning_threads(std::size_t asked) {
  if (asked != 0) return asked;
  cpu_set_t set;
  CPU_ZERO(&set);
  const std::size_t cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? static_cast<std::size_t>(CPU_COUNT(&set))
                                                                         : std::thread::hardware_concurrency();
  return std::clamp<std::size_t>(cpus, 1, 8);
}

log_level parse_log_level(const std::string& what, const std::string& value) {
  std::string l = lower(value);
  if (l == "error") return log_level::error;
  if (l == "warn" || l == "warning") return log_level::warn;
  if (l == "info") return log_level::info;
  if (l == "debug") return log_level::debug;
  bad(what, value, "error, warn, info, debug");
}

validate_mode parse_validate_mode(const std::string& what, const std::string& value) {
  std::string l = lower(value);
  if (l == "off") return validate_mode::off;
  if (l == "first") return validate_mode::first;
  if (l == "always") return validate_mode::always;
  bad(what, value, "off, first, always");
}

const std::vector<option_info>& options_table() {
  static const std::vector<option_info> infos = [] {
    std::vector<option_info> v;
    for (const auto& e : entries()) v.push_back(e.info);
    return v;
  }();
  return infos;
}

namespace {

// The error for a SUBLINEAR_* name that is no setting: it lists the settings.
config_error unknown_setting(const std::string& name) {
  std::string all;
  for (const auto& e : entries()) all += (all.empty() ? "" : ", ") + std::string(e.info.name);
  const std::string shown = name.size() <= 64 ? name : quote_bounded(name);
  return config_error("sublinear: unknown setting " + shown + "; the settings are: " + all);
}

// The build and test scripts' own environment variables (docs/settings.md).
constexpr std::string_view script_variables[] = {"SUBLINEAR_ROOT", "SUBLINEAR_SANITIZER", "SUBLINEAR_STRESS_OPS",
                                                 "SUBLINEAR_BUILD_TYPE", "SUBLINEAR_BUILD_TARGETS"};

}  // namespace

settings read_settings(const env_lookup& lookup, const std::vector<std::string>& environ_names) {
  for (const auto& name : environ_names) {
    if (name.rfind("SUBLINEAR_", 0) != 0) continue;
    bool known = std::any_of(entries().begin(), entries().end(), [&](const entry& e) { return name == e.info.name; });
    // Variables the build and test scripts use for themselves are not settings: a user who
    // runs `SUBLINEAR_BUILD_TYPE=Debug scripts/test.sh` passes them on to every test.
    const bool script_variable = std::find(std::begin(script_variables), std::end(script_variables), name) !=
                                 std::end(script_variables);
    if (!known && !script_variable) throw unknown_setting(name);
  }
  settings s;
  for (const auto& e : entries()) {
    const char* v = lookup(e.info.name);
    if (v == nullptr) continue;
    std::string value(v);
    if (value.empty() && std::string(e.info.default_value).empty()) continue;
    e.set(s, e.info.name, value);
  }
  return s;
}

settings read_settings_from_environment() {
  std::vector<std::string> names;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    names.push_back(kv.substr(0, kv.find('=')));
  }
  return read_settings([](const char* n) { return std::getenv(n); }, names);
}

std::string budget_text(const settings& s) { return s.budget ? s.budget->text : std::string(); }

std::string describe(const settings& s) {
  static const char* levels[] = {"error", "warn", "info", "debug"};
  static const char* validates[] = {"off", "first", "always"};
  std::ostringstream out;
  out << "SUBLINEAR_BUDGET=" << budget_text(s) << "\n"
      << "SUBLINEAR_POLICY=" << s.policy << "\n"
      << "SUBLINEAR_REPORT=" << s.report << "\n"
      << "SUBLINEAR_LOG=" << levels[static_cast<int>(s.log)] << (s.log_file.empty() ? "" : ":" + s.log_file) << "\n"
      << "SUBLINEAR_VALIDATE=" << validates[static_cast<int>(s.validate)] << "\n"
      << "SUBLINEAR_RETENTION=" << (s.retention ? "1" : "0") << "\n"
      << "SUBLINEAR_MULTIPASS=" << (s.multi_pass ? "1" : "0") << "\n"
      << "SUBLINEAR_PACKS=" << (s.packs ? "1" : "0") << "\n"
      << "SUBLINEAR_SCALED_CACHE=" << (s.scaled_cache ? "1" : "0") << "\n"
      << "SUBLINEAR_OFFLOAD="
      << (s.offload == policy::offload_mode::off ? "off" : s.offload == policy::offload_mode::only ? "only" : "auto")
      << "\n"
      << "SUBLINEAR_OFFLOAD_PACKS=" << (s.offload_packs ? "1" : "0") << "\n"
      << "SUBLINEAR_FETCH_MARGIN=" << s.fetch_margin << "\n"
      << "SUBLINEAR_HOST_BUDGET=" << (s.host_budget == 0 ? std::string() : std::to_string(s.host_budget)) << "\n"
      << "SUBLINEAR_LINK_BANDWIDTH="
      << (s.link_to_host == 0.0 ? std::string()
                                : std::to_string(s.link_to_host / 1e9) + "," + std::to_string(s.link_to_device / 1e9))
      << "\n"
      << "SUBLINEAR_PLANNING_THREADS=" << (s.planning_threads == 0 ? std::string() : std::to_string(s.planning_threads))
      << "\n"
      << "SUBLINEAR_TRACE=" << s.trace << "\n"
      << "SUBLINEAR_TRACE_ITERATIONS=" << s.trace_iterations << "\n"
      << "SUBLINEAR_ITERATION=" << (s.iteration == iteration_mode::marker ? "marker" : "auto") << "\n"
      << "SUBLINEAR_DISABLE=" << (s.disable ? "1" : "0") << "\n";
  return out.str();
}

std::string settings_markdown() {
  auto cell = [](std::string text) {
    std::string out;
    for (char c : text) {
      if (c == '|') {
        out += "\\|";
      } else {
        out += c;
      }
    }
    return out;
  };
  std::string out = "| variable | `sublinear run` flag | default | accepted forms | what it does |\n|---|---|---|---|---|\n";
  for (const auto& o : options_table()) {
    const std::string def = *o.default_value ? "`" + std::string(o.default_value) + "`" : "(unset)";
    out += "| `" + std::string(o.name) + "` | `" + flag_name(o) + (o.boolean ? "" : " VALUE") + "` | " + def + " | " +
           cell(o.forms) + " | " + cell(o.doc) + " |\n";
  }
  return out;
}

std::string flag_name(const option_info& o) {
  std::string name(o.name);
  const std::string prefix = "SUBLINEAR_";
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  std::string out = "--";
  for (char c : name) out += c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

const option_info* option_for_flag(std::string_view flag) {
  std::string f(flag);
  if (f.rfind("--", 0) != 0) f = "--" + f;
  for (const auto& o : options_table())
    if (flag_name(o) == f) return &o;
  return nullptr;
}

run_environment compose_run_environment(const std::vector<std::string>& inherited,
                                        const std::vector<std::pair<std::string, std::string>>& overrides,
                                        const std::string& library) {
  const auto& table = entries();
  for (const auto& [name, value] : overrides) {
    const bool known = std::any_of(table.begin(), table.end(), [&](const entry& e) { return name == e.info.name; });
    if (!known) throw unknown_setting(name);
  }
  if (library.empty()) throw config_error("sublinear: no preload library given");

  // Later entries win: inherited first, then the command line's.
  std::vector<std::string> names;
  std::vector<std::string> values;
  std::vector<std::string> verbatim;  // entries without '='
  auto set = [&](const std::string& name, const std::string& value) {
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) {
        values[i] = value;
        return;
      }
    }
    names.push_back(name);
    values.push_back(value);
  };
  for (const auto& kv : inherited) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) {
      verbatim.push_back(kv);
      continue;
    }
    set(kv.substr(0, eq), kv.substr(eq + 1));
  }
  for (const auto& [name, value] : overrides) set(name, value);

  auto get = [&](const std::string& name) -> const std::string* {
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return &values[i];
    return nullptr;
  };

  run_environment out;
  out.effective = read_settings(
      [&](const char* n) -> const char* {
        const std::string* v = get(n);
        return v == nullptr ? nullptr : v->c_str();
      },
      names);

  // LD_PRELOAD: ours first (it must see the CUDA runtime's symbols before the program
  // does), what was there after it, each library once. ld.so separates by ':' or ' '.
  std::string preload = library;
  if (const std::string* existing = get("LD_PRELOAD")) {
    std::string token;
    auto flush = [&] {
      if (!token.empty() && token != library) preload += ":" + token;
      token.clear();
    };
    for (char c : *existing) {
      if (c == ':' || c == ' ') {
        flush();
      } else {
        token += c;
      }
    }
    flush();
  }
  set("LD_PRELOAD", preload);

  if (const std::string* injection = get("CUDA_INJECTION64_PATH"); injection != nullptr && !injection->empty() &&
                                                                    *injection != library) {
    throw config_error("sublinear: CUDA_INJECTION64_PATH is already set to '" + *injection +
                       "' (another CUPTI tool); CUPTI loads one injection library and sublinear needs its own (" +
                       library + "). Unset CUDA_INJECTION64_PATH to run under sublinear.");
  }
  set("CUDA_INJECTION64_PATH", library);
  if (get("PYTORCH_NO_CUDA_MEMORY_CACHING") == nullptr) set("PYTORCH_NO_CUDA_MEMORY_CACHING", "1");

  for (std::size_t i = 0; i < names.size(); ++i) out.variables.push_back(names[i] + "=" + values[i]);
  for (auto& v : verbatim) out.variables.push_back(std::move(v));
  return out;
}

}  // namespace sublinear::runtime
