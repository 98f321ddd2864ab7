// The options table: every setting's accepted forms, every malformed form, unknown
// variables, the effective-configuration dump, and the docs generated from the table.
#include <gtest/gtest.h>

#include <cerrno>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/log_output.hpp"
#include "runtime/settings.hpp"
#include "sublinear/error.hpp"

namespace sublinear::runtime {
namespace {

using env = std::map<std::string, std::string>;

settings read(const env& vars) {
  std::vector<std::string> names;
  for (const auto& [k, v] : vars) names.push_back(k);
  return read_settings(
      [&](const char* name) -> const char* {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      names);
}

// The config_error message for `vars`, or "(accepted)".
std::string error_for(const env& vars) {
  try {
    (void)read(vars);
  } catch (const config_error& e) {
    return e.what();
  }
  return "(accepted)";
}

const option_info& info(const std::string& name) {
  for (const auto& o : options_table())
    if (name == o.name) return o;
  throw std::runtime_error("no option " + name);
}

// A malformed value is refused with a message naming the variable, the value and the forms.
void expect_refused(const std::string& name, const std::string& value, const std::string& forms_part) {
  const std::string e = error_for({{name, value}});
  EXPECT_NE(e, "(accepted)") << name << "='" << value << "' was accepted";
  EXPECT_NE(e.find(name), std::string::npos) << e;
  EXPECT_NE(e.find("'" + value + "'"), std::string::npos) << e;
  EXPECT_NE(e.find(forms_part), std::string::npos) << e;
}

std::string source_root() {
  std::string here = __FILE__;  // <root>/tests/runtime/settings_test.cpp
  return here.substr(0, here.rfind("/tests/runtime/"));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The text between the settings-table markers of a Markdown file.
std::string table_section(const std::string& text) {
  const std::string begin = "<!-- settings-table:begin (generated from options_table(); a test keeps it equal) -->\n";
  const std::string end = "<!-- settings-table:end -->";
  const auto b = text.find(begin);
  const auto e = text.find(end);
  if (b == std::string::npos || e == std::string::npos || e < b) return "(markers not found)";
  return text.substr(b + begin.size(), e - b - begin.size());
}

// ---- the table itself ---------------------------------------------------------------------------------

TEST(OptionsTable, ListsTheRequiredSettingsOnceEachWithFormsAndDoc) {
  std::set<std::string> names;
  for (const auto& o : options_table()) {
    EXPECT_EQ(std::string(o.name).rfind("SUBLINEAR_", 0), 0u) << o.name;
    EXPECT_TRUE(names.insert(o.name).second) << "duplicate " << o.name;
    EXPECT_GT(std::string(o.forms).size(), 0u) << o.name;
    EXPECT_GT(std::string(o.doc).size(), 10u) << o.name;
  }
  for (const char* required : {"SUBLINEAR_BUDGET", "SUBLINEAR_POLICY", "SUBLINEAR_REPORT", "SUBLINEAR_LOG",
                               "SUBLINEAR_VALIDATE", "SUBLINEAR_TRACE", "SUBLINEAR_TRACE_ITERATIONS",
                               "SUBLINEAR_ITERATION", "SUBLINEAR_DISABLE"})
    EXPECT_EQ(names.count(required), 1u) << required;
}

TEST(OptionsTable, EveryDefaultIsAccepted) {
  for (const auto& o : options_table()) {
    if (*o.default_value == '\0') continue;
    EXPECT_EQ(error_for({{o.name, o.default_value}}), "(accepted)") << o.name;
  }
}

TEST(OptionsTable, NothingSetGivesTheDefaults) {
  const settings s = read({});
  const settings d;
  EXPECT_FALSE(s.budget.has_value());
  EXPECT_EQ(s.policy, "reforward");
  EXPECT_EQ(s.report, "");
  EXPECT_EQ(s.log, log_level::warn);
  EXPECT_EQ(s.log_file, "");
  EXPECT_EQ(s.validate, validate_mode::first);
  EXPECT_EQ(s.trace, "");
  EXPECT_EQ(s.trace_iterations, 2);
  EXPECT_EQ(s.iteration, iteration_mode::marker);
  EXPECT_FALSE(s.disable);
  EXPECT_EQ(describe(s), describe(d));
}

TEST(OptionsTable, DefaultsInTheTableMatchTheDefaultSettings) {
  // describe() of the defaults writes each setting's default as the table states it.
  std::istringstream lines(describe(settings{}));
  std::map<std::string, std::string> described;
  for (std::string line; std::getline(lines, line);) described[line.substr(0, line.find('='))] = line.substr(line.find('=') + 1);
  for (const auto& o : options_table()) EXPECT_EQ(described[o.name], o.default_value) << o.name;
}

// ---- SUBLINEAR_BUDGET -----------------------------------------------------------------------------------

TEST(BudgetSetting, AcceptsBytesSharesAndMultiples) {
  for (const char* v : {"8GiB", "512MiB", "1.5GB", "1048576", "64 KiB", "8gib", "60%", "100%", "0.5x", "1.5x", "2048B"})
    EXPECT_EQ(budget_text(read({{"SUBLINEAR_BUDGET", v}})), v) << v;
}

TEST(BudgetSetting, IsParsedIntoItsFormOnce) {
  const auto bytes = read({{"SUBLINEAR_BUDGET", "64 KiB"}}).budget;
  ASSERT_TRUE(bytes.has_value());
  EXPECT_EQ(bytes->form, policy::budget_spec::kind::bytes);
  EXPECT_EQ(bytes->bytes, std::size_t{64} << 10);
  const auto share = read({{"SUBLINEAR_BUDGET", "0.5x"}}).budget;
  ASSERT_TRUE(share.has_value());
  EXPECT_EQ(share->form, policy::budget_spec::kind::peak_fraction);
  EXPECT_EQ(share->fraction, 0.5);
}

TEST(BudgetSetting, RefusesEveryMalformedForm) {
  for (const char* v : {"lots", "8G", "-1GiB", "0", "0GiB", "0x", "0%", "101%", "1e9", "GiB", "8 GiB extra", "8GiBs",
                        "x", "%", "0.5xx", " ", "+8GiB", "8,5GiB"})
    expect_refused("SUBLINEAR_BUDGET", v, "a multiple of the traced peak (0.5x)");
}

// A value of any length is quoted once in its error, bounded: its start and its length.
TEST(BudgetSetting, AVeryLongValueIsQuotedOnceAndBounded) {
  for (const char* name : {"SUBLINEAR_BUDGET", "SUBLINEAR_POLICY", "SUBLINEAR_LOG"}) {
    const std::string value(100000, 'z');
    const std::string e = error_for({{name, value}});
    EXPECT_NE(e, "(accepted)") << name;
    EXPECT_LT(e.size(), 1000u) << name << ": " << e.substr(0, 1000);
    EXPECT_NE(e.find(name), std::string::npos) << e;
    const std::string quoted = "'" + std::string(64, 'z') + "...' (100000 characters)";
    EXPECT_EQ(e.find(quoted), e.rfind(quoted)) << "once: " << e;
    EXPECT_NE(e.find(quoted), std::string::npos) << e;
  }
}

TEST(BudgetSetting, AnEmptyBudgetMeansNone) { EXPECT_FALSE(read({{"SUBLINEAR_BUDGET", ""}}).budget.has_value()); }

// ---- SUBLINEAR_POLICY -----------------------------------------------------------------------------------

TEST(PolicySetting, AcceptsEveryPlanner) {
  for (const char* v : {"none", "sqrtn", "chen", "chain", "tiered", "reforward", "greedy", "dtr"})
    EXPECT_EQ(read({{"SUBLINEAR_POLICY", v}}).policy, v);
}

TEST(PolicySetting, RefusesUnknownNamesListingThePlanners) {
  for (const char* v : {"magic", "Chen ", "", "chen,greedy", "CHEN2"}) expect_refused("SUBLINEAR_POLICY", v, "chen");
  const std::string e = error_for({{"SUBLINEAR_POLICY", "magic"}});
  for (const char* p : {"none", "sqrtn", "chen", "chain", "tiered", "reforward", "greedy", "dtr"})
    EXPECT_NE(e.find(p), std::string::npos) << p << " not listed in: " << e;
}

// ---- paths ----------------------------------------------------------------------------------------------

TEST(PathSettings, TakeAnyPath) {
  const settings s = read({{"SUBLINEAR_REPORT", "/tmp/run report.json"}, {"SUBLINEAR_TRACE", "relative/t.sltrace"}});
  EXPECT_EQ(s.report, "/tmp/run report.json");
  EXPECT_EQ(s.trace, "relative/t.sltrace");
}

// ---- SUBLINEAR_LOG --------------------------------------------------------------------------------------

TEST(LogSetting, AcceptsEveryLevelInAnyCase) {
  EXPECT_EQ(read({{"SUBLINEAR_LOG", "error"}}).log, log_level::error);
  EXPECT_EQ(read({{"SUBLINEAR_LOG", "warn"}}).log, log_level::warn);
  EXPECT_EQ(read({{"SUBLINEAR_LOG", "warning"}}).log, log_level::warn);
  EXPECT_EQ(read({{"SUBLINEAR_LOG", "INFO"}}).log, log_level::info);
  EXPECT_EQ(read({{"SUBLINEAR_LOG", "Debug"}}).log, log_level::debug);
}

TEST(LogSetting, ALevelMayNameALogFile) {
  const settings s = read({{"SUBLINEAR_LOG", "info:/tmp/sublinear.log"}});
  EXPECT_EQ(s.log, log_level::info);
  EXPECT_EQ(s.log_file, "/tmp/sublinear.log");
  EXPECT_NE(describe(s).find("SUBLINEAR_LOG=info:/tmp/sublinear.log"), std::string::npos);
}

// The runtime and `sublinear run`'s check before COMMAND starts say the same thing.
TEST(LogSetting, TheRuntimeNamesWhyTheLogFileCannotBeOpened) {
  const std::string dir = ::testing::TempDir() + "/sublinear-no-such-dir";
  try {
    const log_output out(dir + "/run.log");
    FAIL() << "opened a file in a missing directory";
  } catch (const config_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(log_file_error(dir + "/run.log", ENOENT, false)), std::string::npos) << what;
    EXPECT_NE(what.find("its directory " + dir + " does not exist"), std::string::npos) << what;
    EXPECT_NE(what.find("mkdir -p " + dir), std::string::npos) << what;
  }
  EXPECT_NE(log_file_error("/tmp", EISDIR, true).find("it is a directory"), std::string::npos);
}

TEST(LogSetting, RefusesEveryMalformedForm) {
  for (const char* v : {"verbose", "", "inf", "3", "trace"}) expect_refused("SUBLINEAR_LOG", v, "error, warn, info, debug");
  expect_refused("SUBLINEAR_LOG", "info:", "non-empty path");
  expect_refused("SUBLINEAR_LOG", ":/tmp/x.log", "error, warn, info, debug");
  expect_refused("SUBLINEAR_LOG", "loud:/tmp/x.log", "error, warn, info, debug");
}

// ---- SUBLINEAR_VALIDATE ---------------------------------------------------------------------------------

TEST(ValidateSetting, AcceptsOffFirstAlways) {
  EXPECT_EQ(read({{"SUBLINEAR_VALIDATE", "off"}}).validate, validate_mode::off);
  EXPECT_EQ(read({{"SUBLINEAR_VALIDATE", "first"}}).validate, validate_mode::first);
  EXPECT_EQ(read({{"SUBLINEAR_VALIDATE", "ALWAYS"}}).validate, validate_mode::always);
}

TEST(ValidateSetting, RefusesEveryMalformedForm) {
  for (const char* v : {"on", "0", "", "sometimes", "first,always"})
    expect_refused("SUBLINEAR_VALIDATE", v, "off, first, always");
}

// ---- SUBLINEAR_TRACE_ITERATIONS -------------------------------------------------------------------------

TEST(TraceIterationsSetting, AcceptsOneOrTwo) {
  EXPECT_EQ(read({{"SUBLINEAR_TRACE_ITERATIONS", "1"}}).trace_iterations, 1);
  EXPECT_EQ(read({{"SUBLINEAR_TRACE_ITERATIONS", "2"}}).trace_iterations, 2);
}

TEST(TraceIterationsSetting, RefusesEveryMalformedForm) {
  for (const char* v : {"0", "3", "", "one", " 1", "1 ", "01", "-1", "1.0", "12"})
    expect_refused("SUBLINEAR_TRACE_ITERATIONS", v, "1 or 2");
}

// ---- offload settings -------------------------------------------------------------------------------

TEST(OffloadSetting, AcceptsAutoOffOnlyInAnyCase) {
  EXPECT_EQ(read({}).offload, policy::offload_mode::on);
  EXPECT_EQ(read({{"SUBLINEAR_OFFLOAD", "auto"}}).offload, policy::offload_mode::on);
  EXPECT_EQ(read({{"SUBLINEAR_OFFLOAD", "OFF"}}).offload, policy::offload_mode::off);
  EXPECT_EQ(read({{"SUBLINEAR_OFFLOAD", "only"}}).offload, policy::offload_mode::only);
}

TEST(OffloadSetting, RefusesEveryMalformedForm) {
  for (const char* v : {"", "on", "1", "yes", "al", "only "}) expect_refused("SUBLINEAR_OFFLOAD", v, "auto, off, only");
}

TEST(HostBudgetSetting, TakesBytesWithAUnit) {
  EXPECT_EQ(read({}).host_budget, 0u);
  EXPECT_EQ(read({{"SUBLINEAR_HOST_BUDGET", "16GiB"}}).host_budget, std::size_t{16} << 30);
  EXPECT_EQ(read({{"SUBLINEAR_HOST_BUDGET", "1048576"}}).host_budget, std::size_t{1} << 20);
}

TEST(HostBudgetSetting, RefusesSharesMultiplesZeroAndNonsense) {
  for (const char* v : {"50%", "0.5x", "lots", "-1GiB"})
    expect_refused("SUBLINEAR_HOST_BUDGET", v, "bytes with a unit");
  expect_refused("SUBLINEAR_HOST_BUDGET", "0", "SUBLINEAR_OFFLOAD=off");
}

TEST(LinkBandwidthSetting, TakesOneValueOrOnePerDirectionInGBPerSecond) {
  const settings one = read({{"SUBLINEAR_LINK_BANDWIDTH", "50"}});
  EXPECT_DOUBLE_EQ(one.link_to_host, 50e9);
  EXPECT_DOUBLE_EQ(one.link_to_device, 50e9);
  const settings two = read({{"SUBLINEAR_LINK_BANDWIDTH", "52.8,35.2"}});
  EXPECT_DOUBLE_EQ(two.link_to_host, 52.8e9);
  EXPECT_DOUBLE_EQ(two.link_to_device, 35.2e9);
  EXPECT_EQ(read({}).link_to_host, 0.0);
}

TEST(LinkBandwidthSetting, RefusesEveryMalformedForm) {
  for (const char* v : {"0", "-5", "fast", "50,", ",50", "50,0", "50GB/s", "1,2,3", "nan", "inf"})
    expect_refused("SUBLINEAR_LINK_BANDWIDTH", v, "to-host,to-device");
}

TEST(PlanningThreadsSetting, TakesAWholeNumberFromOneTo64) {
  EXPECT_EQ(read({}).planning_threads, 0u);  // the machine's cores
  EXPECT_EQ(read({{"SUBLINEAR_PLANNING_THREADS", "1"}}).planning_threads, 1u);
  EXPECT_EQ(read({{"SUBLINEAR_PLANNING_THREADS", "64"}}).planning_threads, 64u);
}

TEST(PlanningThreadsSetting, RefusesZeroNegativesFractionsAndWords) {
  for (const char* v : {"0", "65", "-1", "+2", "2.5", "four", "4 ", " 4", "1e1", "99999999999999999999"})
    expect_refused("SUBLINEAR_PLANNING_THREADS", v, "a whole number from 1 to 64");
}

TEST(FetchMarginSetting, TakesANumberFromZeroToFour) {
  EXPECT_DOUBLE_EQ(read({}).fetch_margin, 0.25);
  EXPECT_DOUBLE_EQ(read({{"SUBLINEAR_FETCH_MARGIN", "0"}}).fetch_margin, 0.0);
  EXPECT_DOUBLE_EQ(read({{"SUBLINEAR_FETCH_MARGIN", "0.5"}}).fetch_margin, 0.5);
  EXPECT_DOUBLE_EQ(read({{"SUBLINEAR_FETCH_MARGIN", ".1"}}).fetch_margin, 0.1);
  EXPECT_DOUBLE_EQ(read({{"SUBLINEAR_FETCH_MARGIN", "4"}}).fetch_margin, 4.0);
  EXPECT_NE(describe(read({{"SUBLINEAR_FETCH_MARGIN", "0"}})).find("SUBLINEAR_FETCH_MARGIN=0\n"), std::string::npos);
}

TEST(FetchMarginSetting, RefusesNegativesLargeValuesAndOtherForms) {
  for (const char* v : {"-0.1", "4.5", "+0.5", " 0.5", "0.5 ", "quarter", "25%", "0x1p-2", "nan", "inf", ""})
    expect_refused("SUBLINEAR_FETCH_MARGIN", v, "a number from 0 to 4");
}

// ---- SUBLINEAR_ITERATION --------------------------------------------------------------------------------

TEST(IterationSetting, AcceptsMarkerOrAuto) {
  EXPECT_EQ(read({{"SUBLINEAR_ITERATION", "marker"}}).iteration, iteration_mode::marker);
  EXPECT_EQ(read({{"SUBLINEAR_ITERATION", "auto"}}).iteration, iteration_mode::automatic);
  EXPECT_EQ(read({{"SUBLINEAR_ITERATION", "AUTO"}}).iteration, iteration_mode::automatic);
}

TEST(IterationSetting, RefusesEveryMalformedForm) {
  for (const char* v : {"automatic", "markers", "", "detect"}) expect_refused("SUBLINEAR_ITERATION", v, "marker, auto");
}

// ---- SUBLINEAR_DISABLE ----------------------------------------------------------------------------------

TEST(DisableSetting, AcceptsTheUsualBooleans) {
  for (const char* v : {"1", "true", "TRUE", "yes", "on", "On"}) EXPECT_TRUE(read({{"SUBLINEAR_DISABLE", v}}).disable) << v;
  for (const char* v : {"0", "false", "no", "off", "OFF"}) EXPECT_FALSE(read({{"SUBLINEAR_DISABLE", v}}).disable) << v;
}

TEST(DisableSetting, RefusesEveryMalformedForm) {
  for (const char* v : {"2", "", "y", "n", "enable", "truthy", "-1"})
    expect_refused("SUBLINEAR_DISABLE", v, "1, true, yes, on, 0, false, no, off");
}

TEST(DisableSetting, RetentionMultiPassPacksAndScaledCacheAreTheOnlySwitches) {
  for (const auto& o : options_table()) {
    const std::string n = o.name;
    EXPECT_EQ(o.boolean, n == "SUBLINEAR_DISABLE" || n == "SUBLINEAR_RETENTION" || n == "SUBLINEAR_MULTIPASS" ||
                             n == "SUBLINEAR_PACKS" || n == "SUBLINEAR_SCALED_CACHE" || n == "SUBLINEAR_OFFLOAD_PACKS")
        << n;
  }
}

TEST(ScaledCacheSetting, IsOnByDefaultAndTakesTheBooleanForms) {
  EXPECT_TRUE(read({}).scaled_cache);
  for (const char* v : {"0", "false", "no", "off"})
    EXPECT_FALSE(read({{"SUBLINEAR_SCALED_CACHE", v}}).scaled_cache) << v;
  for (const char* v : {"1", "yes", "ON"}) EXPECT_TRUE(read({{"SUBLINEAR_SCALED_CACHE", v}}).scaled_cache) << v;
  expect_refused("SUBLINEAR_SCALED_CACHE", "half", "1, true, yes, on, 0, false, no, off");
  EXPECT_NE(describe(read({{"SUBLINEAR_SCALED_CACHE", "0"}})).find("SUBLINEAR_SCALED_CACHE=0"), std::string::npos);
}

TEST(MultiPassSetting, IsOnByDefaultAndTakesTheBooleanForms) {
  EXPECT_TRUE(read({}).multi_pass);
  for (const char* v : {"0", "false", "no", "off"}) EXPECT_FALSE(read({{"SUBLINEAR_MULTIPASS", v}}).multi_pass) << v;
  for (const char* v : {"1", "yes", "ON"}) EXPECT_TRUE(read({{"SUBLINEAR_MULTIPASS", v}}).multi_pass) << v;
  expect_refused("SUBLINEAR_MULTIPASS", "twice", "1, true, yes, on, 0, false, no, off");
}

TEST(PacksSetting, IsOnByDefaultAndTakesTheBooleanForms) {
  EXPECT_TRUE(read({}).packs);
  for (const char* v : {"0", "false", "no", "off"}) EXPECT_FALSE(read({{"SUBLINEAR_PACKS", v}}).packs) << v;
  for (const char* v : {"1", "yes", "ON"}) EXPECT_TRUE(read({{"SUBLINEAR_PACKS", v}}).packs) << v;
  expect_refused("SUBLINEAR_PACKS", "some", "1, true, yes, on, 0, false, no, off");
  EXPECT_NE(describe(read({{"SUBLINEAR_PACKS", "0"}})).find("SUBLINEAR_PACKS=0"), std::string::npos);
}

TEST(OffloadPacksSetting, IsOnByDefaultAndTakesTheBooleanForms) {
  EXPECT_TRUE(read({}).offload_packs);
  for (const char* v : {"1", "yes", "ON"}) EXPECT_TRUE(read({{"SUBLINEAR_OFFLOAD_PACKS", v}}).offload_packs) << v;
  for (const char* v : {"0", "false", "no", "off"}) EXPECT_FALSE(read({{"SUBLINEAR_OFFLOAD_PACKS", v}}).offload_packs) << v;
  expect_refused("SUBLINEAR_OFFLOAD_PACKS", "packed", "1, true, yes, on, 0, false, no, off");
  EXPECT_NE(describe(read({{"SUBLINEAR_OFFLOAD_PACKS", "0"}})).find("SUBLINEAR_OFFLOAD_PACKS=0"), std::string::npos);
}

TEST(RetentionSetting, IsOnByDefaultAndTakesTheBooleanForms) {
  EXPECT_TRUE(read({}).retention);
  for (const char* v : {"0", "false", "no", "off"}) EXPECT_FALSE(read({{"SUBLINEAR_RETENTION", v}}).retention) << v;
  for (const char* v : {"1", "yes", "ON"}) EXPECT_TRUE(read({{"SUBLINEAR_RETENTION", v}}).retention) << v;
  expect_refused("SUBLINEAR_RETENTION", "sometimes", "1, true, yes, on, 0, false, no, off");
}

// ---- unknown variables ----------------------------------------------------------------------------------

TEST(UnknownSetting, AMisspeltVariableIsAnErrorListingTheSettings) {
  const std::string e = error_for({{"SUBLINEAR_BUGDET", "8GiB"}});
  EXPECT_NE(e.find("unknown setting SUBLINEAR_BUGDET"), std::string::npos) << e;
  for (const auto& o : options_table()) EXPECT_NE(e.find(o.name), std::string::npos) << o.name << " not in: " << e;
}

TEST(UnknownSetting, OtherPrefixesAndTheHarnessVariablesAreNotSettings) {
  EXPECT_EQ(error_for({{"SUBLINEARX", "1"}, {"MY_SUBLINEAR_BUDGET", "1"}, {"PATH", "/bin"}}), "(accepted)");
  EXPECT_EQ(error_for({{"SUBLINEAR_ROOT", "/src"}, {"SUBLINEAR_SANITIZER", "address"}, {"SUBLINEAR_STRESS_OPS", "9"}}),
            "(accepted)");
  // scripts/lib/deps.sh reads these; set for a test run, they reach every test's environment.
  EXPECT_EQ(error_for({{"SUBLINEAR_BUILD_TYPE", "Debug"}, {"SUBLINEAR_BUILD_TARGETS", "sublinear_cli"}}), "(accepted)");
}

TEST(UnknownSetting, IsOnlyCheckedWhenTheEnvironmentsNamesAreGiven) {
  // A lookup alone cannot enumerate; read_settings_from_environment passes the names.
  const settings s = read_settings([](const char*) -> const char* { return nullptr; }, {});
  EXPECT_EQ(s.policy, "reforward");
  EXPECT_THROW((void)read_settings([](const char*) -> const char* { return nullptr; }, {"SUBLINEAR_TYPO"}),
               config_error);
}

TEST(UnknownSetting, TheFirstMalformedValueStopsEverything) {
  // Several problems: an error, never a partly applied configuration.
  EXPECT_THROW((void)read({{"SUBLINEAR_BUDGET", "8GiB"}, {"SUBLINEAR_LOG", "loud"}}), config_error);
}

// ---- describe and the docs ------------------------------------------------------------------------------

TEST(Describe, ListsEverySettingOnceAndReadsBackToTheSameSettings) {
  settings s;
  s.budget = policy::parse_budget("0.5x");
  s.policy = "greedy";
  s.report = "/tmp/r.json";
  s.log = log_level::debug;
  s.log_file = "/tmp/l.log";
  s.validate = validate_mode::always;
  s.trace = "/tmp/t.sltrace";
  s.trace_iterations = 2;
  s.iteration = iteration_mode::automatic;
  s.disable = true;
  const std::string text = describe(s);
  env vars;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    ASSERT_NE(eq, std::string::npos) << line;
    EXPECT_TRUE(vars.emplace(line.substr(0, eq), line.substr(eq + 1)).second) << "twice: " << line;
  }
  EXPECT_EQ(vars.size(), options_table().size());
  EXPECT_EQ(describe(read(vars)), text);
}

TEST(Flags, AreDerivedFromTheNames) {
  EXPECT_EQ(flag_name(info("SUBLINEAR_BUDGET")), "--budget");
  EXPECT_EQ(flag_name(info("SUBLINEAR_TRACE_ITERATIONS")), "--trace-iterations");
  EXPECT_EQ(option_for_flag("--trace-iterations"), &info("SUBLINEAR_TRACE_ITERATIONS"));
  EXPECT_EQ(option_for_flag("disable"), &info("SUBLINEAR_DISABLE"));
  EXPECT_EQ(option_for_flag("--budgets"), nullptr);
  EXPECT_EQ(option_for_flag("--TRACE"), nullptr);
}

TEST(Docs, TheSettingsTableInDocsIsTheGeneratedOne) {
  const std::string doc = read_file(source_root() + "/docs/settings.md");
  EXPECT_EQ(table_section(doc), settings_markdown())
      << "docs/settings.md is out of date; paste settings_markdown() between its markers";
}

// README.md shows the five most used settings: the header and those rows of the generated
// table, between its own markers, in the table's order.
TEST(Docs, TheReadmeShowsTheFiveMostUsedRowsOfTheGeneratedTable) {
  const std::string readme = read_file(source_root() + "/README.md");
  const std::string begin = "<!-- settings-top:begin (rows of the generated table; a test keeps them equal) -->\n";
  const auto b = readme.find(begin), e = readme.find("<!-- settings-top:end -->");
  ASSERT_TRUE(b != std::string::npos && e != std::string::npos && b < e) << "README.md: settings-top markers not found";
  std::string expected;
  std::istringstream table(settings_markdown());
  int header = 0;
  for (std::string line; std::getline(table, line);) {
    const bool top = line.starts_with("| `SUBLINEAR_BUDGET`") || line.starts_with("| `SUBLINEAR_POLICY`") ||
                     line.starts_with("| `SUBLINEAR_REPORT`") || line.starts_with("| `SUBLINEAR_LOG`") ||
                     line.starts_with("| `SUBLINEAR_VALIDATE`");
    if (header++ < 2 || top) expected += line + "\n";
  }
  EXPECT_EQ(readme.substr(b + begin.size(), e - b - begin.size()), expected)
      << "README.md is out of date; paste these rows of settings_markdown() between its markers";
}

TEST(Docs, TheMarkdownTableHasARowPerSetting) {
  const std::string md = settings_markdown();
  for (const auto& o : options_table()) {
    EXPECT_NE(md.find("| `" + std::string(o.name) + "` |"), std::string::npos) << o.name;
    EXPECT_NE(md.find("`" + flag_name(o)), std::string::npos) << o.name;
  }
}

}  // namespace
}  // namespace sublinear::runtime
