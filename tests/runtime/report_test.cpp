// Reports: the JSON document validates against its schema and round-trips, the JSON layer
// refuses malformed input, the Chrome trace parses with the expected tracks, the SVG plot
// is well-formed XML with both curves and the budget line, and the text table ranks the
// evicted buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "allocator/default_allocator.hpp"
#include "device/host/device.hpp"
#include "device/host/host_vmm.hpp"
#include "runtime/host/host_runtime.hpp"
#include "runtime/report/report.hpp"
#include "runtime/report/report_json.hpp"
#include "workloads/memory.hpp"
#include "workloads/models/registry.hpp"
#include "workloads/training.hpp"
#include "runtime/tight_session.hpp"

namespace sublinear::runtime {
namespace {

std::string source_root() {
  std::string here = __FILE__;  // <root>/tests/runtime/report_test.cpp
  return here.substr(0, here.rfind("/tests/runtime/"));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A model of the kind at its default sizes (resnet: `depth` layers): large enough that
// activations span many pages, small enough that an iteration takes milliseconds.
std::unique_ptr<workloads::models::model> test_model(workloads::models::model_kind kind, std::int64_t depth = 20) {
  workloads::models::model_config c;
  c.kind = kind;
  if (kind == workloads::models::model_kind::resnet) c.depth = depth;
  return workloads::models::make_model(c);
}


// ---- a real run, once for the suite ------------------------------------------------------------------

// ResNet-56 under a budget of 0.8x its traced peak with Chen's planner: 4 iterations
// (trace, validate, steady, steady) with the timeline recorded.
const run_report& real_report() {
  static const run_report report = [] {
    tight_session session;
    auto ctx = session.make_context();
    auto model = test_model(workloads::models::model_kind::resnet, 56);
    model->init(ctx, 7);
    engine_options o;
    o.config.budget = policy::parse_budget("0.8x");
    o.config.policy = "chen";
    o.device_capacity = session.vmm().physical_capacity();
    o.record_timeline = true;
    run_report r;
    {
      host_runtime rt(session.device(), session.allocator(), o);
      workloads::training_options to;
      to.iterations = 4;
      to.seed = 7;
      to.on_iteration_end = [&](const workloads::iteration_figures&) { rt.mark_iteration(); };
      workloads::train(ctx, *model, to);
      report_metadata meta;
      meta.model = model->name();
      meta.granularity = session.allocator().granularity();
      r = make_report(rt.get(), o.config, meta);
    }
    model->release();
    return r;
  }();
  return report;
}

// A small report from plain data, for renderer tests that need exact figures.
run_report handmade_report() {
  settings config;
  config.budget = policy::parse_budget("6MiB");
  report_metadata meta;
  meta.model = "toy";
  meta.granularity = 64 << 10;
  plan_summary plan{"chen", 6u << 20, 5u << 20, 7u << 20, ""};
  std::vector<iteration_report> its(2);
  its[0].index = 0;
  its[0].state = engine_state::trace;
  its[0].peak_mapped = 10u << 20;
  its[1].index = 1;
  its[1].state = engine_state::steady;
  its[1].peak_mapped = 5u << 20;
  its[1].budget = 6u << 20;
  its[1].evictions = 3;
  its[1].evicted_bytes = 3u << 20;
  its[1].recomputed_launches = 4;
  its[1].recompute_s = 0.002;
  its[1].stall_s = 0.001;
  std::vector<eviction_record> ev = {
      {1u << 20, "conv_fwd", 1, 1, 0.001, false},
      {4u << 20, "gemm_fwd", 1, 1, 0.003, false},
      {2u << 20, "relu_fwd", 3, 3, 0.0005, true},
  };
  std::vector<timeline_event> tl;
  auto memory = [&](double t, std::size_t mapped) {
    timeline_event e;
    e.what = timeline_event::kind::memory;
    e.begin_s = e.end_s = t;
    e.mapped = mapped;
    e.allocated = mapped / 2;
    tl.push_back(e);
  };
  auto closing = [&](double begin, double end, std::size_t peak, const char* state) {
    timeline_event e;
    e.what = timeline_event::kind::iteration;
    e.begin_s = begin;
    e.end_s = end;
    e.bytes = peak;
    e.label = state;
    tl.push_back(e);
  };
  memory(0.001, 2u << 20);
  memory(0.002, 2u << 20);  // repeat: dropped
  memory(0.003, 10u << 20);
  memory(0.004, 4u << 20);
  memory(0.005, 4u << 20);  // repeat, but the iteration's last sample: kept
  closing(0.0, 0.006, 10u << 20, "trace");
  memory(0.007, 3u << 20);
  timeline_event evict;
  evict.what = timeline_event::kind::evict;
  evict.begin_s = evict.end_s = 0.0075;
  evict.bytes = 1u << 20;
  evict.label = "conv_fwd";
  tl.push_back(evict);
  memory(0.008, 5u << 20);
  timeline_event regen;
  regen.what = timeline_event::kind::regenerate;
  regen.begin_s = 0.0085;
  regen.end_s = 0.0090;
  regen.bytes = 1u << 20;
  regen.label = "conv_fwd";
  tl.push_back(regen);
  memory(0.010, 4u << 20);
  closing(0.006, 0.011, 5u << 20, "steady");
  return make_report(config, meta, plan, its, ev, tl);
}

json::value schema() { return json::parse(report_schema(), "report-schema.json"); }

// ---- the schema ---------------------------------------------------------------------------------------

TEST(ReportSchema, TheDocumentedSchemaIsTheEmbeddedOne) {
  const std::string doc = read_file(source_root() + "/docs/report-schema.json");
  ASSERT_FALSE(doc.empty()) << "docs/report-schema.json not found under " << source_root();
  EXPECT_EQ(json::parse(doc, "docs/report-schema.json"), schema());
}

TEST(ReportSchema, UsesOnlyKeywordsTheValidatorImplements) {
  // Validating anything walks the schema; an unimplemented keyword would be reported.
  const auto problems = json::validate(json::parse(to_json(handmade_report())), schema());
  for (const auto& p : problems) EXPECT_EQ(p.find("does not implement"), std::string::npos) << p;
  EXPECT_TRUE(problems.empty()) << problems.front();
}

TEST(ReportJson, AReportFromARealRunValidatesAgainstTheSchema) {
  const run_report& r = real_report();
  ASSERT_EQ(r.iterations.size(), 4u);
  ASSERT_TRUE(r.plan.error.empty()) << r.plan.error;
  EXPECT_GT(r.plan.budget, 0u);
  EXPECT_FALSE(r.evictions.empty());
  EXPECT_FALSE(r.timeline.empty());
  const auto problems = json::validate(json::parse(to_json(r), "real.json"), schema());
  EXPECT_TRUE(problems.empty()) << problems.size() << " problems, first: " << problems.front();
}

TEST(ReportJson, RoundTripsThroughTheParser) {
  for (const run_report* r : {&real_report()}) {
    const std::string text = to_json(*r);
    EXPECT_EQ(to_json(parse_report(text, "r.json")), text);
  }
  const std::string text = to_json(handmade_report());
  EXPECT_EQ(to_json(parse_report(text, "h.json")), text);
}

TEST(ReportJson, CarriesTheSettingsThePlanAndTheTotals) {
  const json::value doc = json::parse(to_json(handmade_report()));
  EXPECT_EQ(doc.at("schema").as_string(), "sublinear-report");
  EXPECT_EQ(doc.at("schema_version").as_number(), 1);
  EXPECT_EQ(doc.at("settings").at("SUBLINEAR_BUDGET").as_string(), "6MiB");
  EXPECT_EQ(doc.at("settings").as_object().size(), options_table().size());
  EXPECT_EQ(doc.at("plan").at("budget_bytes").as_size(), 6u << 20);
  EXPECT_EQ(doc.at("plan").at("traced_mapped_peak_bytes").as_size(), 7u << 20);
  const auto& summary = doc.at("summary");
  EXPECT_EQ(summary.at("evictions").as_size(), 3u);
  EXPECT_EQ(summary.at("traced_peak_bytes").as_size(), 10u << 20);
  EXPECT_EQ(summary.at("budgeted_peak_bytes").as_size(), 5u << 20);
  EXPECT_TRUE(summary.at("within_budget").as_bool());
  EXPECT_EQ(doc.at("evictions").as_array().size(), 3u);
}

// Reports written before the plan carried traced_mapped_peak_bytes read as 0 (unknown).
TEST(ReportJson, AReportWithoutThePlansTracedMappedPeakReadsAsUnknown) {
  std::string text = to_json(handmade_report());
  const std::string member = "\"traced_mapped_peak_bytes\": " + std::to_string(7u << 20) + ",";
  const auto at = text.find(member);
  ASSERT_NE(at, std::string::npos) << text.substr(0, 600);
  text.erase(at, member.size());
  EXPECT_EQ(parse_report(text, "old.json").plan.traced_mapped_peak, 0u);
}

// The plan's recompute beside the recompute floor (Note [Recompute floor]).
TEST(ReportJson, ThePlanCarriesItsRecomputeAndTheFloorBelowIt) {
  const run_report& real = real_report();
  ASSERT_TRUE(real.plan.error.empty()) << real.plan.error;
  EXPECT_GT(real.plan.added_compute_s, 0.0) << "0.8x of ResNet-56 recomputes something";
  EXPECT_GT(real.plan.traced_compute_s, real.plan.added_compute_s);
  EXPECT_GT(real.plan.floor_s, 0.0) << "0.8x leaves launches over the budget";
  EXPECT_LE(real.plan.floor_s, real.plan.added_compute_s * (1 + 1e-9));
  const run_report back = parse_report(to_json(real), "r.json");
  EXPECT_EQ(back.plan.floor_s, real.plan.floor_s);
  EXPECT_EQ(back.plan.added_compute_s, real.plan.added_compute_s);
  EXPECT_EQ(back.plan.traced_compute_s, real.plan.traced_compute_s);
  const std::string text = render_text(real, 5);
  EXPECT_NE(text.find("planned recompute"), std::string::npos) << text;
  EXPECT_NE(text.find("the recompute floor"), std::string::npos) << text;

  // Older reports without the three read as 0, and the text says nothing of them.
  std::string old = to_json(handmade_report());
  for (const char* key : {"added_compute_s", "floor_s", "traced_compute_s"}) {
    const auto at = old.find(std::string("\"") + key + "\": 0,");
    ASSERT_NE(at, std::string::npos) << key;
    old.erase(at, std::string("\"").size() + std::strlen(key) + std::string("\": 0,").size());
  }
  const run_report r = parse_report(old, "old.json");
  EXPECT_EQ(r.plan.floor_s, 0.0);
  EXPECT_EQ(r.plan.traced_compute_s, 0.0);
  EXPECT_EQ(render_text(r, 5).find("planned recompute"), std::string::npos);
}

// The pause at the marker that made the plan: measured, carried through the JSON, shown in
// the text; an older report without it reads as 0 and the text leaves the line out.
TEST(ReportJson, ThePlanCarriesThePauseThatMadeIt) {
  const run_report& real = real_report();
  ASSERT_TRUE(real.plan.error.empty()) << real.plan.error;
  EXPECT_GT(real.plan.planning_s, 0.0) << "the engine planned at a marker";
  EXPECT_EQ(parse_report(to_json(real), "r.json").plan.planning_s, real.plan.planning_s);
  EXPECT_NE(render_text(real, 5).find("the pause at the marker"), std::string::npos) << render_text(real, 5);

  std::string old = to_json(handmade_report());
  const std::string member = "\"planning_s\": 0,";
  const auto at = old.find(member);
  ASSERT_NE(at, std::string::npos) << old.substr(0, 600);
  old.erase(at, member.size());
  const run_report r = parse_report(old, "old.json");
  EXPECT_EQ(r.plan.planning_s, 0.0);
  EXPECT_EQ(render_text(r, 5).find("the pause at the marker"), std::string::npos);
}

// With offload on, the floor is the offload floor (added time, Note [Offload floor]) and
// the text names it so.
TEST(ReportJson, AnOffloadFloorIsNamedAsOne) {
  run_report r = handmade_report();
  r.plan.added_compute_s = 0.002;
  r.plan.traced_compute_s = 0.010;
  r.plan.floor_s = 0.001;
  r.plan.floor_with_offload = true;
  const run_report back = parse_report(to_json(r), "r.json");
  EXPECT_TRUE(back.plan.floor_with_offload);
  EXPECT_EQ(back.plan.floor_s, 0.001);
  const std::string text = render_text(back, 5);
  EXPECT_NE(text.find("no plan that may also offload adds less time than"), std::string::npos) << text;
  EXPECT_NE(text.find("the offload floor"), std::string::npos) << text;
  EXPECT_EQ(text.find("the recompute floor"), std::string::npos) << text;
  r.plan.floor_with_offload = false;
  EXPECT_NE(render_text(parse_report(to_json(r), "r.json"), 5).find("the recompute floor"), std::string::npos);
}

TEST(ReportJson, ParseRefusesAnotherSchemaVersionByName) {
  std::string text = to_json(handmade_report());
  const auto at = text.find("\"schema_version\": 1");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 19, "\"schema_version\": 2");
  try {
    (void)parse_report(text, "future.json");
    FAIL() << "accepted";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("future.json: report schema version 2 is not supported"), std::string::npos)
        << e.what();
  }
}

TEST(ReportJson, ParseNamesEveryProblemWithItsPointer) {
  std::string text = to_json(handmade_report());
  const auto at = text.find("\"peak_mapped_bytes\": 5242880");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 28, "\"peak_mapped_bytes\": \"5MiB\"");
  try {
    (void)parse_report(text, "bad.json");
    FAIL() << "accepted";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("/iterations/1/peak_mapped_bytes: expected integer, got string"),
              std::string::npos)
        << e.what();
  }
}

// Numbers outside a field's range are refused with the field's JSON pointer: 1e308 and
// 2^64 bytes once read as "0 B" (a double cast to an integer it does not fit), and 1e308
// seconds printed 300 digits.
std::string range_error(const std::string& from, const std::string& to) {
  std::string text = to_json(handmade_report());
  const auto at = text.find(from);
  if (at == std::string::npos) return "(" + from + " not in the report)";
  text.replace(at, from.size(), to);
  try {
    (void)parse_report(text, "range.json");
  } catch (const config_error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ReportJson, ParseRefusesNumbersOutsideTheirFieldsRangeWithThePointer) {
  for (const char* peak : {"1e308", "18446744073709551616", "9007199254740994"}) {
    const std::string e = range_error("\"peak_mapped_bytes\": 5242880", std::string("\"peak_mapped_bytes\": ") + peak);
    EXPECT_NE(e.find("range.json: not a valid sublinear report"), std::string::npos) << e;
    EXPECT_NE(e.find("/iterations/1/peak_mapped_bytes: "), std::string::npos) << e;
    EXPECT_NE(e.find("is above the maximum 9007199254740992"), std::string::npos) << e;
  }
  const std::string wall = range_error("\"wall_s\": 0", "\"wall_s\": 1e308");
  EXPECT_NE(wall.find("/iterations/0/wall_s: 1e+308 is above the maximum 1000000000"), std::string::npos) << wall;
  const std::string times = range_error("\"times_evicted\": 3", "\"times_evicted\": 1e20");
  EXPECT_NE(times.find("/evictions/2/times_evicted: "), std::string::npos) << times;
  EXPECT_EQ(range_error("\"peak_mapped_bytes\": 5242880", "\"peak_mapped_bytes\": 9007199254740992"), "(accepted)")
      << "the limit itself is a byte count";
}

// The writer keeps a report's totals inside the schema's range, so that what the reader
// accepts (each count at most 2^53) writes back as a valid report.
TEST(ReportJson, TotalsOfCountsAtTheLimitStayWithinIt) {
  run_report r = handmade_report();
  for (auto& it : r.iterations) {
    it.evicted_bytes = max_report_integer;
    it.recompute_s = max_report_seconds;
  }
  const report_totals t = totals(r);
  EXPECT_EQ(t.evicted_bytes, max_report_integer);
  EXPECT_EQ(t.recompute_s, max_report_seconds);
  EXPECT_NO_THROW((void)parse_report(to_json(r), "limits.json"));
}

TEST(ReportFile, RefusesAPathThatIsNotARegularFileWithoutReadingIt) {
  for (const std::string& path : std::vector<std::string>{"/dev/zero", ::testing::TempDir()}) {
    try {
      (void)read_text_file(path);
      FAIL() << path << " was read";
    } catch (const config_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("cannot read '" + path + "': not a regular file"), std::string::npos) << msg;
      EXPECT_NE(msg.find("save the report to a file"), std::string::npos) << msg;
    }
  }
}

TEST(ReportFile, RefusesAFileOverTheSizeLimitWithoutReadingIt) {
  const std::string path = ::testing::TempDir() + "/report_too_large.json";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fseek(f, static_cast<long>(max_report_file_bytes), SEEK_SET), 0);  // sparse
  ASSERT_EQ(std::fputc(' ', f), ' ');
  std::fclose(f);
  try {
    (void)read_text_file(path);
    ADD_FAILURE() << "read";
  } catch (const config_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'" + path + "': 1073741825 bytes, more than the limit of 1073741824 bytes"),
              std::string::npos)
        << msg;
  }
  std::remove(path.c_str());
}

// tests/fuzz/corpus/report_reader: the report fuzzer's inputs (scripts/fuzz.sh), each read
// or refused with a message naming it, and what is read renders.
TEST(ReportFuzzCorpus, EveryInputParsesAndRendersOrIsRefusedWithAReason) {
  std::size_t inputs = 0, valid = 0;
  for (const auto& entry : std::filesystem::directory_iterator(source_root() + "/tests/fuzz/corpus/report_reader")) {
    if (!entry.is_regular_file()) continue;
    ++inputs;
    const std::string name = entry.path().filename().string();
    try {
      const run_report r = parse_report(read_text_file(entry.path().string()), name);
      ++valid;
      EXPECT_FALSE(render_text(r).empty()) << name;
      EXPECT_FALSE(render_chrome_trace(r).empty()) << name;
      EXPECT_FALSE(render_memory_plot(r).empty()) << name;
      EXPECT_NO_THROW((void)parse_report(to_json(r), name)) << name << ": what was read must write back";
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  EXPECT_GE(inputs, 10u) << "the corpus is missing";
  EXPECT_GE(valid, 10u) << "the corpus hardly reaches the renderers";
}

TEST(ReportJson, ThinningDropsRepeatedMemorySamplesButKeepsEachIterationsLast) {
  const run_report r = handmade_report();
  EXPECT_EQ(r.timeline_dropped, 1u);
  std::vector<std::size_t> launches;
  for (const auto& e : r.timeline)
    if (e.event.what == timeline_event::kind::memory && e.iteration == 0) launches.push_back(e.launch);
  EXPECT_EQ(launches, (std::vector<std::size_t>{1, 3, 4, 5}));
  for (const auto& e : r.timeline) {
    if (e.event.what == timeline_event::kind::evict) {
      EXPECT_EQ(e.iteration, 1u);
    }
  }
}

// ---- the JSON layer -----------------------------------------------------------------------------------

std::string parse_error(const std::string& text) {
  try {
    (void)json::parse(text, "t.json");
  } catch (const config_error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(JsonParser, RefusesWhatTheRfcRefuses) {
  for (const char* bad : {"", "{", "[1,]", "{\"a\":1,}", "01", "1.", ".5", "-", "+1", "1e", "NaN", "Infinity",
                          "'a'", "\"a", "\"\\x\"", "\"\\ud800\"", "\"a\nb\"", "{a:1}", "[1 2]", "true false", "nul",
                          "{\"a\" 1}", "[", "\"\\u12g4\""})
    EXPECT_NE(parse_error(bad), "(accepted)") << bad;
}

TEST(JsonParser, SaysWhereTheProblemIs) {
  const std::string e = parse_error("{\n  \"a\": [1, 2,, 3]\n}");
  EXPECT_NE(e.find("t.json:2:"), std::string::npos) << e;
}

TEST(JsonParser, RefusesDeepNesting) {
  EXPECT_NE(parse_error(std::string(1000, '[') + std::string(1000, ']')).find("nesting"), std::string::npos);
  EXPECT_EQ(parse_error(std::string(100, '[') + std::string(100, ']')), "(accepted)");
}

TEST(JsonParser, ReadsEscapesAndUnicode) {
  const json::value v = json::parse(R"(["a\"b\\c\/\n\t", "\u00e9\u20ac", "\ud83d\ude00"])");
  EXPECT_EQ(v.as_array()[0].as_string(), "a\"b\\c/\n\t");
  EXPECT_EQ(v.as_array()[1].as_string(), "\xc3\xa9\xe2\x82\xac");
  EXPECT_EQ(v.as_array()[2].as_string(), "\xf0\x9f\x98\x80");
}

TEST(JsonWriter, NumbersAndStringsReadBackExactly) {
  for (double d : {0.0, 1.0, -3.0, 0.1, 1e-7, 123456789.125, 9007199254740991.0, 2.5e300})
    EXPECT_EQ(json::parse(json::number(d)).as_number(), d) << d;
  const std::string s = std::string("quote\" back\\ nl\n tab\t ctl\x01 ") + "\xc3\xa9";
  EXPECT_EQ(json::parse(json::quote(s)).as_string(), s);
  EXPECT_EQ(json::number(std::numeric_limits<double>::quiet_NaN()), "null");
}

TEST(SchemaValidator, ChecksTypesEnumsRequiredRefsAndExtraMembers) {
  const json::value s = json::parse(R"({
    "type": "object", "required": ["n", "k"], "additionalProperties": false,
    "properties": {"n": {"$ref": "#/$defs/count"}, "k": {"enum": ["a", "b"]}, "l": {"type": "array", "items": {"type": "string"}}},
    "$defs": {"count": {"type": "integer", "minimum": 0}}})");
  EXPECT_TRUE(json::validate(json::parse(R"({"n": 3, "k": "a", "l": ["x"]})"), s).empty());
  auto first = [&](const char* doc) {
    auto p = json::validate(json::parse(doc), s);
    return p.empty() ? std::string("(valid)") : p.front();
  };
  EXPECT_EQ(first(R"({"n": 1.5, "k": "a"})"), "/n: expected integer, got number");
  EXPECT_EQ(first(R"({"n": -1, "k": "a"})"), "/n: -1 is below the minimum 0");
  EXPECT_EQ(first(R"({"n": 1, "k": "c"})"), "/k: \"c\" is not one of [\"a\",\"b\"]");
  EXPECT_EQ(first(R"({"n": 1})"), "/: missing member \"k\"");
  EXPECT_EQ(first(R"({"n": 1, "k": "a", "z": 0})"), "/: unexpected member \"z\"");
  EXPECT_EQ(first(R"({"n": 1, "k": "a", "l": [1]})"), "/l/0: expected string, got number");
  EXPECT_EQ(first(R"([])"), "/: expected object, got array");
}

TEST(SchemaValidator, RefusesAKeywordItDoesNotImplement) {
  const auto p = json::validate(json::parse("1"), json::parse(R"({"multipleOf": 2})"));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("does not implement"), std::string::npos);
}

// ---- the Chrome trace ---------------------------------------------------------------------------------

struct chrome_tracks {
  std::set<std::string> threads;
  std::set<std::string> counters;
  std::map<std::string, std::size_t> slices_per_thread;
};

chrome_tracks tracks_of(const std::string& text) {
  const json::value doc = json::parse(text, "chrome.json");
  chrome_tracks t;
  std::map<double, std::string> thread_names;
  for (const auto& e : doc.at("traceEvents").as_array())
    if (e.at("ph").as_string() == "M" && e.at("name").as_string() == "thread_name")
      thread_names[e.at("tid").as_number()] = e.at("args").at("name").as_string();
  for (const auto& e : doc.at("traceEvents").as_array()) {
    const std::string ph = e.at("ph").as_string();
    EXPECT_TRUE(ph == "M" || ph == "X" || ph == "C") << ph;
    if (ph == "C") {
      t.counters.insert(e.at("name").as_string());
      EXPECT_GE(e.at("ts").as_number(), 0.0);
      EXPECT_TRUE(e.at("args").at("bytes").is_integer());
    } else if (ph == "X") {
      EXPECT_GE(e.at("ts").as_number(), 0.0);
      EXPECT_GT(e.at("dur").as_number(), 0.0);
      ++t.slices_per_thread[thread_names.at(e.at("tid").as_number())];
    }
  }
  for (const auto& [tid, name] : thread_names) t.threads.insert(name);
  return t;
}

TEST(ChromeTrace, ARealRunParsesAsJsonWithTheExpectedTracks) {
  chrome_tracks t = tracks_of(render_chrome_trace(real_report()));
  EXPECT_EQ(t.threads, (std::set<std::string>{"iterations", "evictions", "replay", "stalls", "copy stream"}));
  EXPECT_EQ(t.counters, (std::set<std::string>{"mapped", "allocated", "budget"}));
  EXPECT_EQ(t.slices_per_thread.at("iterations"), 4u);
  EXPECT_GT(t.slices_per_thread["evictions"], 0u);
  EXPECT_GT(t.slices_per_thread["replay"], 0u);
  EXPECT_EQ(t.slices_per_thread["stalls"], t.slices_per_thread["replay"]);
}

TEST(ChromeTrace, TheBudgetCounterFollowsThePlan) {
  const json::value doc = json::parse(render_chrome_trace(handmade_report()));
  std::vector<std::size_t> budgets;
  for (const auto& e : doc.at("traceEvents").as_array())
    if (e.at("ph").as_string() == "C" && e.at("name").as_string() == "budget")
      budgets.push_back(e.at("args").at("bytes").as_size());
  EXPECT_EQ(budgets, (std::vector<std::size_t>{0, 6u << 20}));  // none while tracing, then the plan's
}

// ---- the SVG plot -------------------------------------------------------------------------------------

// A small well-formedness check: one root element, properly nested and closed tags,
// quoted attributes, known entities, no stray '<' or '&'. Returns "" or the problem;
// collects element ids and the text content.
struct xml_facts {
  std::string error;
  std::vector<std::string> ids;
  std::string text;
  std::size_t elements = 0;
};

xml_facts check_xml(const std::string& s) {
  xml_facts f;
  std::size_t i = 0;
  auto fail = [&](const std::string& what) {
    if (f.error.empty()) f.error = what + " at offset " + std::to_string(i);
  };
  auto entity_ok = [&](std::size_t at) {
    for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
      if (s.compare(at, std::strlen(e), e) == 0) return std::strlen(e);
    return std::size_t{0};
  };
  auto name_at = [&]() {
    const std::size_t b = i;
    while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '-' || s[i] == ':' || s[i] == '_'))
      ++i;
    return s.substr(b, i - b);
  };
  if (s.compare(0, 5, "<?xml") == 0) i = s.find("?>") + 2;
  std::vector<std::string> open;
  bool root_closed = false;
  while (i < s.size() && f.error.empty()) {
    if (s[i] == '<') {
      if (root_closed) fail("content after the root element");
      ++i;
      if (i < s.size() && s[i] == '/') {
        ++i;
        const std::string n = name_at();
        if (open.empty() || open.back() != n) fail("mismatched </" + n + ">");
        if (!open.empty()) open.pop_back();
        if (i >= s.size() || s[i] != '>') fail("bad end tag");
        ++i;
        if (open.empty()) root_closed = true;
        continue;
      }
      const std::string n = name_at();
      if (n.empty()) fail("empty element name");
      ++f.elements;
      for (;;) {
        while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
        if (i >= s.size()) {
          fail("unterminated tag");
          break;
        }
        if (s[i] == '>') {
          open.push_back(n);
          ++i;
          break;
        }
        if (s.compare(i, 2, "/>") == 0) {
          i += 2;
          if (open.empty()) root_closed = true;
          break;
        }
        const std::string attr = name_at();
        if (attr.empty() || i >= s.size() || s[i] != '=' || s[i + 1] != '"') {
          fail("attribute without a quoted value in <" + n + ">");
          break;
        }
        i += 2;
        const std::size_t b = i;
        while (i < s.size() && s[i] != '"') {
          if (s[i] == '<') fail("'<' in an attribute");
          if (s[i] == '&') {
            const std::size_t len = entity_ok(i);
            if (len == 0) fail("bad entity in an attribute");
            i += len ? len - 1 : 0;
          }
          ++i;
        }
        if (attr == "id") f.ids.push_back(s.substr(b, i - b));
        ++i;
      }
    } else {
      if (s[i] == '&') {
        const std::size_t len = entity_ok(i);
        if (len == 0) fail("bad entity");
        f.text += s.substr(i, len ? len : 1);
        i += len ? len : 1;
        continue;
      }
      if (open.empty() && !std::isspace(static_cast<unsigned char>(s[i]))) fail("text outside the root element");
      f.text += s[i];
      ++i;
    }
  }
  if (f.error.empty() && (!open.empty() || !root_closed)) f.error = "unclosed elements";
  return f;
}

TEST(XmlCheck, CatchesTheMistakesItLooksFor) {
  EXPECT_EQ(check_xml("<a x=\"1\"><b/>t &amp; u</a>").error, "");
  EXPECT_NE(check_xml("<a><b></a></b>").error, "");
  EXPECT_NE(check_xml("<a x=1></a>").error, "");
  EXPECT_NE(check_xml("<a>R&D</a>").error, "");
  EXPECT_NE(check_xml("<a></a><b></b>").error, "");
  EXPECT_NE(check_xml("<a>").error, "");
}

TEST(MemoryPlot, ARealRunGivesWellFormedSvgWithBothCurvesAndTheBudget) {
  const std::string svg = render_memory_plot(real_report());
  const xml_facts f = check_xml(svg);
  ASSERT_EQ(f.error, "") << svg.substr(0, 2000);
  EXPECT_EQ(svg.compare(0, 5, "<?xml"), 0);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  for (const char* id : {"baseline", "budgeted", "budget", "axes", "legend"})
    EXPECT_NE(std::find(f.ids.begin(), f.ids.end(), id), f.ids.end()) << id;
  // Readable without the project: a title, both axis labels with units, a legend per series.
  EXPECT_NE(f.text.find("Device memory during one training iteration"), std::string::npos);
  EXPECT_NE(f.text.find("device memory ("), std::string::npos);
  EXPECT_NE(f.text.find("launches into the iteration"), std::string::npos);
  EXPECT_NE(f.text.find("without a budget"), std::string::npos);
  EXPECT_NE(f.text.find("with sublinear"), std::string::npos);
  EXPECT_NE(f.text.find("budget on mapped memory"), std::string::npos);
}

// The y pixel of every vertex of the path with this id (y grows downward in SVG).
std::vector<double> path_ys(const std::string& svg, const std::string& id) {
  const auto a = svg.find("id=\"" + id + "\"");
  if (a == std::string::npos) return {};
  const auto b = svg.find(" d=\"", a) + 4;
  const std::string d = svg.substr(b, svg.find('"', b) - b);
  std::vector<double> ys;
  for (std::size_t at = d.find_first_of("MV"); at != std::string::npos; at = d.find_first_of("MV", at + 1)) {
    const std::string rest = d.substr(at + 1);
    ys.push_back(d[at] == 'M' ? std::stod(rest.substr(rest.find(',') + 1)) : std::stod(rest));
  }
  return ys;
}

TEST(MemoryPlot, ShowsLiveMemoryAsAMountainBesideMappedMemoryAndMarksEvictions) {
  const run_report& r = real_report();
  const std::string svg = render_memory_plot(r);
  ASSERT_EQ(check_xml(svg).error, "");
  for (const char* id : {"baseline-mapped", "budgeted-mapped", "evictions", "regenerations"})
    EXPECT_NE(svg.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  // The traced iteration's live memory climbs through the forward pass and falls in
  // backward: its highest point (smallest y) lies strictly between its ends.
  const auto live = path_ys(svg, "baseline");
  ASSERT_GE(live.size(), 3u);
  const auto top = std::min_element(live.begin(), live.end());
  EXPECT_LT(*top, live.front() - 10) << "no climb";
  EXPECT_LT(*top, live.back() - 10) << "no fall";
  // Mapped memory is never below live memory: the budgeted mapped curve's highest point is
  // at least as high as the budgeted live curve's, and the budget caps both.
  const auto budgeted_live = path_ys(svg, "budgeted"), budgeted_mapped = path_ys(svg, "budgeted-mapped");
  ASSERT_FALSE(budgeted_live.empty());
  ASSERT_FALSE(budgeted_mapped.empty());
  EXPECT_LE(*std::min_element(budgeted_mapped.begin(), budgeted_mapped.end()),
            *std::min_element(budgeted_live.begin(), budgeted_live.end()) + 1e-9);
  // The legend counts the budgeted iteration's evictions, as the report does.
  std::size_t evictions = 0;
  for (const auto& it : r.iterations)
    if (it.state == engine_state::steady && !it.diverged) evictions = it.evictions;
  EXPECT_GT(evictions, 0u);
  EXPECT_NE(svg.find(std::to_string(evictions) + " evictions (ticks"), std::string::npos) << svg.substr(svg.find("legend"));
}

TEST(ReportJson, MemorySamplesCarryEvictedBytesAndEvictionsTheirLaunch) {
  const run_report& r = real_report();
  std::size_t with_evicted = 0, evictions_with_launch = 0;
  for (const auto& e : r.timeline) {
    if (e.event.what == timeline_event::kind::memory && e.event.evicted > 0) {
      EXPECT_LE(e.event.evicted, e.event.allocated);
      ++with_evicted;
    }
    if (e.event.what == timeline_event::kind::evict && e.launch > 0) ++evictions_with_launch;
  }
  EXPECT_GT(with_evicted, 0u);
  EXPECT_GT(evictions_with_launch, 0u);
  const run_report back = parse_report(to_json(r), "r.json");
  ASSERT_EQ(back.timeline.size(), r.timeline.size());
  for (std::size_t i = 0; i < r.timeline.size(); ++i) {
    if (r.timeline[i].event.what == timeline_event::kind::memory) {
      EXPECT_EQ(back.timeline[i].event.evicted, r.timeline[i].event.evicted) << i;
    }
    EXPECT_EQ(back.timeline[i].launch, r.timeline[i].launch) << i;
  }
}

TEST(MemoryPlot, TheBudgetedCurveStaysBelowTheBudgetLine) {
  // y grows downward in SVG: every vertex of the budgeted path is at or below the line.
  const std::string svg = render_memory_plot(handmade_report());
  ASSERT_EQ(check_xml(svg).error, "");
  auto attr_after = [&](const std::string& anchor, const std::string& name) {
    const auto a = svg.find(anchor);
    const auto b = svg.find(" " + name + "=\"", a) + name.size() + 3;
    return svg.substr(b, svg.find('"', b) - b);
  };
  const double budget_y = std::stod(attr_after("id=\"budget\"", "y1"));
  const std::string d = attr_after("id=\"budgeted\"", "d");
  std::size_t checked = 0;
  for (std::size_t at = d.find_first_of("MV"); at != std::string::npos; at = d.find_first_of("MV", at + 1)) {
    const std::string rest = d.substr(at + 1);
    const double y = d[at] == 'M' ? std::stod(rest.substr(rest.find(',') + 1)) : std::stod(rest);
    EXPECT_GE(y, budget_y - 1e-9) << d;
    ++checked;
  }
  EXPECT_GE(checked, 3u);
}

TEST(MemoryPlot, AReportWithoutSamplesSaysSo) {
  run_report r = handmade_report();
  r.timeline.clear();
  const std::string svg = render_memory_plot(r);
  EXPECT_EQ(check_xml(svg).error, "");
  EXPECT_NE(svg.find("No memory samples"), std::string::npos);
}

TEST(MemoryPlot, EscapesTextFromTheReport) {
  run_report r = handmade_report();
  r.model = "R&D <model> \"x\"";
  EXPECT_EQ(check_xml(render_memory_plot(r)).error, "");
}

// ---- text ---------------------------------------------------------------------------------------------

TEST(EvictionTable, RanksBuffersByBytesGivenBackWithEveryColumn) {
  const std::string table = render_eviction_table(handmade_report());
  const auto relu = table.find("relu_fwd"), gemm = table.find("gemm_fwd"), conv = table.find("conv_fwd");
  ASSERT_NE(relu, std::string::npos) << table;
  // relu: 2 MiB x 3 = 6 MiB; gemm: 4 MiB x 1; conv: 1 MiB x 1.
  EXPECT_LT(relu, gemm) << table;
  EXPECT_LT(gemm, conv) << table;
  for (const char* column : {"size", "producer kernel", "evicted", "recomputed", "cost/regen", "total cost"})
    EXPECT_NE(table.find(column), std::string::npos) << column;
  EXPECT_NE(table.find("4.00 MiB"), std::string::npos) << table;
  EXPECT_NE(table.find("1.50 ms"), std::string::npos) << "relu's total cost, 3 x 0.5 ms:\n" << table;
  EXPECT_NE(table.find("never evict"), std::string::npos) << table;
}

// A size times its evictions can pass 2^64: a buffer of a third of 2^64 bytes evicted 3
// times once wrapped to a product of 2 and dropped out of the table's top rows.
TEST(EvictionTable, RanksBySizeTimesEvictionsBeyondSixtyFourBits) {
  run_report r = handmade_report();
  r.evictions.push_back({std::size_t{6148914691236517206u}, "huge_fwd", 3, 3, 0.001, false});  // (2^64 + 2) / 3
  const std::string table = render_eviction_table(r, 1);
  EXPECT_NE(table.find("huge_fwd"), std::string::npos) << table;
}

TEST(EvictionTable, ShowsTheTopRowsAndCountsTheRest) {
  const std::string table = render_eviction_table(handmade_report(), 2);
  EXPECT_EQ(table.find("conv_fwd"), std::string::npos) << table;
  EXPECT_NE(table.find("and 1 more buffers"), std::string::npos) << table;
}

TEST(TextReport, SummarisesTheRunAndFlagsABudgetOverrun) {
  run_report r = handmade_report();
  std::string text = render_text(r);
  EXPECT_NE(text.find("within the budget"), std::string::npos) << text;
  EXPECT_NE(text.find("SUBLINEAR_BUDGET=6MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("per iteration"), std::string::npos) << text;
  EXPECT_NE(text.find("top evicted buffers"), std::string::npos) << text;
  r.iterations[1].peak_mapped = 7u << 20;
  text = render_text(r);
  EXPECT_NE(text.find("ABOVE THE BUDGET"), std::string::npos) << text;
}

TEST(TextReport, ARunWithoutAPlanSaysWhy) {
  run_report r = handmade_report();
  r.plan = {"chen", 0, 0, 0, "budget 1.00 KiB is infeasible; the smallest feasible is 3.00 MiB"};
  EXPECT_NE(render_text(r).find("none in force: budget 1.00 KiB is infeasible"), std::string::npos);
}

}  // namespace
}  // namespace sublinear::runtime

namespace sublinear::runtime {
namespace {

// Two traced iterations under an absolute budget (offloading), then a steady one.
run_report offloading_report(std::size_t traced_peak) {
  std::vector<iteration_report> its(3);
  for (std::size_t i = 0; i < its.size(); ++i) {
    its[i].index = i;
    its[i].budget = 4u << 20;
    its[i].peak_mapped = 4u << 20;
  }
  its[0].state = its[1].state = engine_state::trace;
  its[0].peak_mapped = traced_peak;
  its[0].offloads = its[1].offloads = 3;
  its[0].offloaded_bytes = its[1].offloaded_bytes = 3u << 19;
  its[0].offload_restores = its[1].offload_restores = 3;
  its[2].state = engine_state::steady;
  its[2].prefetched = 5;
  its[2].pressure_evictions = 2;
  its[2].kept_resident = 1;
  its[2].stray_pointers = 7;
  its[2].allocator_waits = 4;
  its[2].handoffs = 9;
  settings config;
  report_metadata meta;
  meta.model = "offloading";
  return make_report(config, meta, plan_summary{"reforward", 4u << 20, 3u << 20, 5u << 20, ""}, its, {}, {});
}

TEST(ReportJson, OffloadPrefetchValveAndKeptResidentCountsRoundTrip) {
  const run_report r = offloading_report(4u << 20);
  const run_report back = parse_report(to_json(r), "o.json");
  ASSERT_EQ(back.iterations.size(), 3u);
  EXPECT_EQ(back.iterations[0].offloads, 3u);
  EXPECT_EQ(back.iterations[1].offloaded_bytes, std::size_t{3} << 19);
  EXPECT_EQ(back.iterations[1].offload_restores, 3u);
  EXPECT_EQ(back.iterations[2].prefetched, 5u);
  EXPECT_EQ(back.iterations[2].pressure_evictions, 2u);
  EXPECT_EQ(back.iterations[2].kept_resident, 1u);
  EXPECT_EQ(back.iterations[2].stray_pointers, 7u);
  EXPECT_EQ(back.iterations[2].allocator_waits, 4u);
  EXPECT_EQ(back.iterations[2].handoffs, 9u);
  const std::string text = render_text(back);
  EXPECT_NE(text.find("offloaded          6 blocks"), std::string::npos) << text;
  EXPECT_NE(text.find("pressure valve     2"), std::string::npos) << text;
  EXPECT_NE(text.find("kept resident      1"), std::string::npos) << text;
  EXPECT_NE(text.find("stray pointers     7"), std::string::npos) << text;
  EXPECT_NE(text.find("allocator          4 waits for a stream to make room, 9 chunks taken"), std::string::npos) << text;
}

TEST(TextReport, OffloadsWhileTracingCountTracedIterationsOnly) {
  run_report r = offloading_report(4u << 20);
  r.iterations[2].offloads = 40;  // the plan's own offloads in the steady iteration
  r.iterations[2].offloaded_bytes = std::size_t{40} << 20;
  EXPECT_NE(render_text(r).find("offloaded          6 blocks"), std::string::npos) << render_text(r);
  for (std::size_t i = 0; i < 2; ++i) {
    r.iterations[i].offloads = 0;
    r.iterations[i].offloaded_bytes = 0;
  }
  EXPECT_EQ(render_text(r).find("while tracing"), std::string::npos) << render_text(r);
}

TEST(ReportJson, ADivergenceKeepsItsReasonThroughJsonAndText) {
  run_report r = offloading_report(4u << 20);
  r.iterations[2].diverged = true;
  r.iterations[2].divergence = "allocation 17 has size 4096, traced 8192";
  const run_report back = parse_report(to_json(r), "d.json");
  EXPECT_TRUE(back.iterations[2].diverged);
  EXPECT_EQ(back.iterations[2].divergence, "allocation 17 has size 4096, traced 8192");
  EXPECT_EQ(back.iterations[1].divergence, "") << "written only for a diverged iteration";
  const std::string text = render_text(back);
  EXPECT_NE(text.find("iteration 2 diverged: allocation 17 has size 4096, traced 8192"), std::string::npos) << text;
}

TEST(ReportTotals, ATracedIterationAboveItsAbsoluteBudgetIsNotWithinBudget) {
  EXPECT_TRUE(totals(offloading_report(4u << 20)).within_budget);
  EXPECT_FALSE(totals(offloading_report(5u << 20)).within_budget);
}

}  // namespace
}  // namespace sublinear::runtime
