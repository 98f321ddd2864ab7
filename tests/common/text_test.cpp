#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "common/round_up.hpp"
#include "common/text.hpp"

namespace sublinear {
namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;

TEST(FormatBytes, BelowAKibibyteIsWholeBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
}

TEST(FormatBytes, AboveItTwoDecimalsInTheLargestBinaryUnit) {
  EXPECT_EQ(format_bytes(KiB), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3 * MiB + 256 * KiB), "3.25 MiB");
  EXPECT_EQ(format_bytes(8 * GiB), "8.00 GiB");
  EXPECT_EQ(format_bytes(std::size_t{2} << 40), "2.00 TiB");
}

TEST(FormatBytes, TheLargestCountStaysInTebibytes) {
  const std::string text = format_bytes(~std::size_t{0});
  EXPECT_EQ(text.substr(text.size() - 4), " TiB") << text;
}

// A budget named in a message is given back by users: shown rounded down ("13.09 MiB" for
// 13.094 MiB), it asked for less than was named and was refused again.
TEST(FormatBytesAtLeast, RoundsUpAtTheSecondDecimal) {
  EXPECT_EQ(format_bytes_at_least(512), "512 B");
  EXPECT_EQ(format_bytes_at_least(KiB), "1.00 KiB");
  EXPECT_EQ(format_bytes_at_least(KiB + 1), "1.01 KiB");
  EXPECT_EQ(format_bytes_at_least(3 * MiB + 256 * KiB), "3.25 MiB");
  const std::size_t b = 13 * MiB + 94 * MiB / 1000;  // 13.094 MiB
  EXPECT_EQ(format_bytes(b), "13.09 MiB");
  EXPECT_EQ(format_bytes_at_least(b), "13.10 MiB");
  EXPECT_EQ(format_bytes_at_least(2 * MiB - 1), "2.00 MiB");
  EXPECT_EQ(format_bytes_at_least(8 * GiB + 1), "8.01 GiB");
}

TEST(QuoteBounded, QuotesAShortValueWholeAndALongOneByItsStartAndLength) {
  EXPECT_EQ(quote_bounded("lots"), "'lots'");
  const std::string huge(100000, 'x');
  const std::string q = quote_bounded(huge);
  EXPECT_LT(q.size(), 100u) << q;
  EXPECT_EQ(q, "'" + std::string(64, 'x') + "...' (100000 characters)");
  EXPECT_EQ(quote_bounded("abcdef", 3), "'abc...' (6 characters)");
}

TEST(JsonQuote, QuotesAndEscapesWhatJsonRequires) {
  EXPECT_EQ(json_quote(""), "\"\"");
  EXPECT_EQ(json_quote("plain"), "\"plain\"");
  EXPECT_EQ(json_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(json_quote("line\nbreak\ttab\rreturn"), "\"line\\nbreak\\ttab\\rreturn\"");
  EXPECT_EQ(json_quote(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
}

TEST(JsonQuote, LeavesNonAsciiBytesAsTheyAre) { EXPECT_EQ(json_quote("µs"), "\"µs\""); }

TEST(RoundUp, RoundsToTheNextMultiple) {
  EXPECT_EQ(round_up(0, 512), 0u);
  EXPECT_EQ(round_up(1, 512), 512u);
  EXPECT_EQ(round_up(512, 512), 512u);
  EXPECT_EQ(round_up(513, 512), 1024u);
  EXPECT_EQ(round_up(3 * MiB + 1, 2 * MiB), 4 * MiB);
}

TEST(RoundUp, AUnitOfZeroOrOneLeavesTheCountAsItIs) {
  EXPECT_EQ(round_up(777, 0), 777u);
  EXPECT_EQ(round_up(777, 1), 777u);
}

static_assert(round_up(100, 64) == 128, "usable in constant expressions");

}  // namespace
}  // namespace sublinear
