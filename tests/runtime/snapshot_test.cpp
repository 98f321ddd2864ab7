// The PyTorch memory snapshot (report_snapshot.cpp): read back by a small independent
// unpickler here and, when python3 is installed, by Python's own pickle module; the
// history pairs every allocation with its free, evictions and regenerations carry their
// frames, and the final segment is tiled exactly by its blocks.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "runtime/report/report.hpp"
#include "sublinear/error.hpp"

namespace sublinear::runtime {
namespace {

// ---- a reader for the opcodes the viewer accepts ----------------------------------------------------

struct pvalue;
using plist = std::vector<pvalue>;
using pdict = std::map<std::string, pvalue>;
struct pvalue {
  std::variant<std::monostate, std::int64_t, std::string, bool, std::shared_ptr<plist>, std::shared_ptr<pdict>> v;
  [[nodiscard]] std::int64_t num() const { return std::get<std::int64_t>(v); }
  [[nodiscard]] const std::string& str() const { return std::get<std::string>(v); }
  [[nodiscard]] const plist& list() const { return *std::get<std::shared_ptr<plist>>(v); }
  [[nodiscard]] const pdict& dict() const { return *std::get<std::shared_ptr<pdict>>(v); }
  [[nodiscard]] const pvalue& operator[](const std::string& k) const { return dict().at(k); }
};

// Throws std::runtime_error on any opcode the viewer's JavaScript unpickler would refuse.
pvalue unpickle(const std::string& b) {
  std::size_t at = 0;
  std::vector<pvalue> stack;
  std::vector<std::size_t> marks;
  auto byte = [&]() -> std::uint8_t {
    if (at >= b.size()) throw std::runtime_error("truncated pickle");
    return static_cast<std::uint8_t>(b[at++]);
  };
  auto le = [&](int n) {
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(byte()) << (8 * i);
    return v;
  };
  for (;;) {
    const std::uint8_t op = byte();
    switch (op) {
      case 0x80:
        if (byte() != 2) throw std::runtime_error("protocol is not 2");
        break;
      case '}': stack.push_back({std::make_shared<pdict>()}); break;
      case ']': stack.push_back({std::make_shared<plist>()}); break;
      case '(': marks.push_back(stack.size()); break;
      case 'K': stack.push_back({static_cast<std::int64_t>(byte())}); break;
      case 'J': stack.push_back({static_cast<std::int64_t>(static_cast<std::int32_t>(le(4)))}); break;
      case 0x8a: {
        const int n = byte();
        if (n != 8) throw std::runtime_error("LONG1 of unexpected length");
        stack.push_back({static_cast<std::int64_t>(le(8))});
        break;
      }
      case 'X': {
        const auto n = static_cast<std::size_t>(le(4));
        if (at + n > b.size()) throw std::runtime_error("string past the end");
        stack.push_back({b.substr(at, n)});
        at += n;
        break;
      }
      case 0x88: stack.push_back({true}); break;
      case 0x89: stack.push_back({false}); break;
      case 'e': case 'u': {
        if (marks.empty()) throw std::runtime_error("APPENDS/SETITEMS without MARK");
        const std::size_t m = marks.back();
        marks.pop_back();
        if (m == 0) throw std::runtime_error("no container under the MARK");
        pvalue& target = stack[m - 1];
        if (op == 'e') {
          auto& l = *std::get<std::shared_ptr<plist>>(target.v);
          for (std::size_t i = m; i < stack.size(); ++i) l.push_back(stack[i]);
        } else {
          if ((stack.size() - m) % 2 != 0) throw std::runtime_error("odd SETITEMS");
          auto& d = *std::get<std::shared_ptr<pdict>>(target.v);
          for (std::size_t i = m; i < stack.size(); i += 2) d[stack[i].str()] = stack[i + 1];
        }
        stack.resize(m);
        break;
      }
      case '.':
        if (stack.size() != 1 || at != b.size()) throw std::runtime_error("STOP with a malformed stack or trailing bytes");
        return stack.back();
      default: throw std::runtime_error("opcode the viewer does not read: " + std::to_string(op));
    }
  }
}

// ---- a report with every kind of per-block event -------------------------------------------------------

timeline_event block(timeline_event::kind k, double t, std::uintptr_t a, std::size_t n, std::string label = {}) {
  timeline_event e;
  e.what = k;
  e.begin_s = e.end_s = t;
  e.address = a;
  e.bytes = n;
  e.label = std::move(label);
  return e;
}

constexpr std::uintptr_t kBase = 0x7f0000000000ULL;  // above 2^32: the LONG1 path

run_report handmade() {
  using k = timeline_event::kind;
  std::vector<timeline_event> tl{
      block(k::allocate, 0.001, kBase, 4096),
      block(k::allocate, 0.002, kBase + 4096, 8192),
      block(k::allocate, 0.003, kBase + 3 * 4096, 4096),
      block(k::release, 0.004, kBase, 4096),
      block(k::evict, 0.005, kBase + 4096, 8192, "conv_fwd"),
      block(k::regenerate, 0.006, kBase + 4096, 8192, "conv_fwd"),
  };
  timeline_event it;
  it.what = k::iteration;
  it.begin_s = 0;
  it.end_s = 0.007;
  it.label = "steady";
  tl.push_back(it);
  iteration_report ir;
  ir.index = 0;
  ir.state = engine_state::steady;
  settings config;
  report_metadata meta;
  meta.model = "handmade";
  return make_report(config, meta, plan_summary{}, {ir}, {}, tl);
}

TEST(TorchSnapshot, ReadsBackWithOnlyTheOpcodesTheViewerKnows) {
  const pvalue s = unpickle(render_torch_snapshot(handmade()));
  EXPECT_EQ(s.dict().count("segments"), 1u);
  EXPECT_EQ(s.dict().count("device_traces"), 1u);
  EXPECT_EQ(s["allocator_settings"]["model"].str(), "handmade");
}

TEST(TorchSnapshot, TheHistoryHasEveryBlockEventInOrder) {
  const pvalue s = unpickle(render_torch_snapshot(handmade()));
  const plist& trace = s["device_traces"].list().at(0).list();
  const std::vector<std::string> expected{"alloc",          "alloc",          "alloc", "free_requested",
                                          "free_completed", "free_requested", "free_completed", "alloc"};
  ASSERT_EQ(trace.size(), expected.size());
  for (std::size_t i = 0; i < trace.size(); ++i) EXPECT_EQ(trace[i]["action"].str(), expected[i]) << i;
  EXPECT_EQ(static_cast<std::uintptr_t>(trace[0]["addr"].num()), kBase);
  EXPECT_EQ(trace[1]["size"].num(), 8192);
  EXPECT_EQ(trace[2]["time_us"].num(), 3000);
}

TEST(TorchSnapshot, EvictionsAndRegenerationsSayWhatSublinearDid) {
  const pvalue s = unpickle(render_torch_snapshot(handmade()));
  const plist& trace = s["device_traces"].list().at(0).list();
  const std::string evicted = trace[5]["frames"].list().at(0)["name"].str();
  EXPECT_NE(evicted.find("evicted by sublinear"), std::string::npos) << evicted;
  EXPECT_NE(evicted.find("conv_fwd"), std::string::npos) << evicted;
  const std::string regenerated = trace[7]["frames"].list().at(0)["name"].str();
  EXPECT_NE(regenerated.find("regenerated by sublinear"), std::string::npos) << regenerated;
  EXPECT_TRUE(trace[0]["frames"].list().empty());  // a plain allocation: no frame
}

TEST(TorchSnapshot, TheFinalSegmentIsTiledExactlyByItsBlocks) {
  const pvalue s = unpickle(render_torch_snapshot(handmade()));
  const pvalue& seg = s["segments"].list().at(0);
  EXPECT_EQ(static_cast<std::uintptr_t>(seg["address"].num()), kBase);
  EXPECT_EQ(seg["total_size"].num(), 4 * 4096);
  std::int64_t sum = 0, active = 0;
  std::vector<std::string> states;
  for (const pvalue& b : seg["blocks"].list()) {
    sum += b["size"].num();
    states.push_back(b["state"].str());
    if (b["state"].str() == "active_allocated") active += b["size"].num();
  }
  EXPECT_EQ(sum, seg["total_size"].num());
  // Freed first page, the regenerated 8 KiB block, the last page still allocated.
  EXPECT_EQ(states, (std::vector<std::string>{"inactive", "active_allocated", "active_allocated"}));
  EXPECT_EQ(active, seg["active_size"].num());
  EXPECT_EQ(active, 8192 + 4096);
}

TEST(TorchSnapshot, AReportWithoutBlockEventsIsRefusedWithTheReason) {
  run_report r = handmade();
  std::erase_if(r.timeline, [](const report_event& e) { return e.event.what != timeline_event::kind::iteration; });
  try {
    (void)render_torch_snapshot(r);
    FAIL() << "expected config_error";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("no per-block events"), std::string::npos) << e.what();
  }
}

TEST(TorchSnapshot, PythonsPickleReadsTheSameStructure) {
  if (std::system("python3 -c 'import pickle' >/dev/null 2>&1") != 0) GTEST_SKIP() << "python3 is not installed";
  char path[] = "/tmp/sublinear_snapshot_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    std::ofstream out(path, std::ios::binary);
    out << render_torch_snapshot(handmade());
  }
  const std::string cmd = std::string("python3 -c \"import pickle,sys; s=pickle.load(open(sys.argv[1],'rb')); "
                                      "t=s['device_traces'][0]; "
                                      "print(len(t), t[0]['addr'], s['segments'][0]['total_size'], "
                                      "t[5]['frames'][0]['filename'])\" ") +
                          path;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[256] = {};
  const bool got = std::fgets(line, sizeof line, p) != nullptr;
  const int status = pclose(p);
  std::remove(path);
  ASSERT_TRUE(got);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(std::string(line), "8 " + std::to_string(kBase) + " 16384 sublinear\n");
}

}  // namespace
}  // namespace sublinear::runtime
