// Regression test for the fuzzer's corpus: every saved input, the ones that once found new
// paths in the reader included, is either a valid trace or rejected with a
// trace_format_error that says why. Under the sanitizer builds this also proves the
// reader reads nothing out of bounds on them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tracer/trace_file.hpp"

namespace sublinear::tracer {
namespace {

std::filesystem::path corpus_dir() {
  return std::filesystem::path(__FILE__).parent_path().parent_path() / "fuzz" / "corpus" / "trace_reader";
}

TEST(TraceReaderCorpus, EveryInputDecodesOrIsRejectedWithAReason) {
  std::size_t inputs = 0, valid = 0, rejected = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus_dir())) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> bytes(chars.size());
    for (std::size_t i = 0; i < chars.size(); ++i) bytes[i] = static_cast<std::byte>(chars[i]);
    ++inputs;
    try {
      const trace t = decode_trace(bytes, entry.path().filename().string());
      ++valid;
      EXPECT_EQ(decode_trace(encode_trace(t)), t) << entry.path().filename() << ": a valid trace must round-trip";
    } catch (const trace_format_error& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()).find(entry.path().filename().string()), std::string::npos)
          << "the error must name its input: " << e.what();
    }
  }
  EXPECT_GE(inputs, 10u) << "the corpus is missing from " << corpus_dir();
  EXPECT_EQ(valid + rejected, inputs);
}

}  // namespace
}  // namespace sublinear::tracer
