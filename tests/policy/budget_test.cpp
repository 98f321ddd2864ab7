#include "policy/budget.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/text.hpp"

namespace sublinear::policy {
namespace {

using ::testing::HasSubstr;

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t GiB = std::size_t{1} << 30;
constexpr std::size_t TiB = std::size_t{1} << 40;

std::size_t bytes(std::string_view text) { return parse_budget_bytes(text, 0, 0); }

TEST(Budget, BinaryUnitsArePowersOf1024) {
  EXPECT_EQ(bytes("8GiB"), 8 * GiB);
  EXPECT_EQ(bytes("512MiB"), 512 * MiB);
  EXPECT_EQ(bytes("3KiB"), 3 * KiB);
  EXPECT_EQ(bytes("2TiB"), 2 * TiB);
}

TEST(Budget, DecimalUnitsArePowersOf1000) {
  EXPECT_EQ(bytes("1.5GB"), std::size_t{1'500'000'000});
  EXPECT_EQ(bytes("2MB"), std::size_t{2'000'000});
  EXPECT_EQ(bytes("7KB"), std::size_t{7'000});
  EXPECT_EQ(bytes("1TB"), std::size_t{1'000'000'000'000});
}

TEST(Budget, PlainNumbersAndBAreBytes) {
  EXPECT_EQ(bytes("1048576"), MiB);
  EXPECT_EQ(bytes("4096B"), std::size_t{4096});
}

TEST(Budget, FractionalByteCountsRoundDown) {
  EXPECT_EQ(bytes("1.5KiB"), std::size_t{1536});
  EXPECT_EQ(bytes("0.5GiB"), GiB / 2);
  EXPECT_EQ(bytes("1.0001KB"), std::size_t{1000});
}

TEST(Budget, UnitsIgnoreCaseAndSpacesAroundTheValue) {
  EXPECT_EQ(bytes("8gib"), 8 * GiB);
  EXPECT_EQ(bytes(" 8 GiB "), 8 * GiB);
  EXPECT_EQ(bytes("1.5 gb"), std::size_t{1'500'000'000});
}

TEST(Budget, PercentIsAShareOfDeviceMemory) {
  const budget_spec spec = parse_budget("60%");
  EXPECT_EQ(spec.form, budget_spec::kind::device_fraction);
  EXPECT_EQ(resolve_budget(spec, 10 * GiB, 0), static_cast<std::size_t>(6 * GiB));
  EXPECT_EQ(parse_budget_bytes("100%", 80 * GiB, 0), 80 * GiB);
  EXPECT_EQ(parse_budget_bytes("12.5%", 8 * GiB, 0), GiB);
}

TEST(Budget, XIsAMultipleOfTheTracedPeak) {
  const budget_spec spec = parse_budget("0.5x");
  EXPECT_EQ(spec.form, budget_spec::kind::peak_fraction);
  EXPECT_EQ(resolve_budget(spec, 0, 10 * GiB), 5 * GiB);
  EXPECT_EQ(parse_budget_bytes("1.5X", 0, 2 * GiB), 3 * GiB);
}

TEST(Budget, PercentWithoutADeviceCapacityIsAnErrorThatSaysSo) {
  try {
    (void)parse_budget_bytes("60%", 0, 1 * GiB);
    FAIL() << "expected config_error";
  } catch (const config_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'60%'"));
    EXPECT_THAT(e.what(), HasSubstr("capacity is not known"));
  }
}

TEST(Budget, MultipleOfThePeakBeforeATraceIsAnErrorThatSaysSo) {
  try {
    (void)parse_budget_bytes("0.5x", 16 * GiB, 0);
    FAIL() << "expected config_error";
  } catch (const config_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'0.5x'"));
    EXPECT_THAT(e.what(), HasSubstr("no iteration has been traced"));
  }
}

TEST(Budget, ASingleLetterUnitIsAnErrorThatSuggestsTheTwoItCouldMean) {
  // "8G" could be GiB or GB; the Python package shows this same message (one parser).
  for (const char* text : {"8G", "8g", "512M"}) {
    try {
      (void)parse_budget(text);
      FAIL() << "expected config_error for '" << text << "'";
    } catch (const config_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("single-letter units are ambiguous: write GiB or GB"));
    }
  }
  try {
    (void)parse_budget("8 GiBs");
    FAIL() << "expected config_error";
  } catch (const config_error& e) {
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("single-letter")));
  }
}

class MalformedBudget : public ::testing::TestWithParam<const char*> {};

TEST_P(MalformedBudget, IsAConfigErrorNamingTheValueAndTheAcceptedForms) {
  const std::string text = GetParam();
  try {
    (void)parse_budget(text);
    FAIL() << "expected config_error for '" << text << "'";
  } catch (const config_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'" + text + "'"));
    EXPECT_THAT(e.what(), HasSubstr("8GiB"));
    EXPECT_THAT(e.what(), HasSubstr("60%"));
    EXPECT_THAT(e.what(), HasSubstr("0.5x"));
  }
}

INSTANTIATE_TEST_SUITE_P(Forms, MalformedBudget,
                         ::testing::Values("", "   ", "GiB", "-1GiB", "+1GiB", "8G", "8GiBs", "8 Gi B", "1e9", "0.5.5x",
                                           "1.", ".5x", "0", "0GiB", "0.0001B", "0%", "150%", "0x", "-0.5x", "nan",
                                           "inf", "8 iB", "99999999999999999999", "20000000TiB", "5%%", "x", "0x10"));

TEST(Budget, ParsingKeepsTheTextForMessages) { EXPECT_EQ(parse_budget("8GiB").text, "8GiB"); }

TEST(Budget, MessagesFormatBytesInBinaryUnits) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(8 * GiB), "8.00 GiB");
}

TEST(Budget, InfeasibleBudgetNamesTheSmallestFeasibleBudget) {
  const infeasible_budget e("chain", GiB, 3 * GiB / 2, GiB + MiB);
  EXPECT_EQ(e.budget(), GiB);
  EXPECT_EQ(e.smallest_feasible(), 3 * GiB / 2);
  EXPECT_EQ(e.lower_bound(), GiB + MiB);
  EXPECT_THAT(e.what(), HasSubstr("'chain'"));
  EXPECT_THAT(e.what(), HasSubstr("1.50 GiB (1610612736 bytes)"));
  const config_error& base = e;  // callers catching config errors see it too
  EXPECT_THAT(base.what(), HasSubstr("infeasible"));
}

// The smallest feasible budget a message names is given back as shown: rounded down
// ("13.09 MiB" for 13.094 MiB) it asked for less than was named and was refused again.
TEST(Budget, TheSmallestFeasibleBudgetAsShownParsesBackToAtLeastItsBytes) {
  const std::size_t b = 13 * MiB + 94 * MiB / 1000;
  const infeasible_budget e("greedy", 10 * MiB, b, 5 * MiB);
  EXPECT_THAT(e.what(), HasSubstr("the smallest feasible budget for it is 13.10 MiB (" + std::to_string(b) + " bytes)"));
  for (std::size_t n : {KiB + 1, 13 * MiB + 94 * MiB / 1000, 3 * MiB + 1, 5 * GiB - 1, 7 * GiB + 12345, 2 * TiB + 3,
                        MiB * 100 / 3, std::size_t{999999999}}) {
    const std::string shown = format_bytes_at_least(n);
    EXPECT_GE(bytes(shown), n) << shown;
    EXPECT_LE(bytes(shown) - n, (n >= TiB ? TiB : n >= GiB ? GiB : n >= MiB ? MiB : KiB) / 100 + 1) << shown;
  }
}

// A long malformed value is quoted once, by its start and its length.
TEST(Budget, AVeryLongMalformedValueIsQuotedOnceAndBounded) {
  const std::string text(100000, '9');
  try {
    (void)parse_budget(text + "q");
    FAIL() << "accepted";
  } catch (const config_error& e) {
    const std::string what = e.what();
    EXPECT_LT(what.size(), 600u) << what.substr(0, 600);
    EXPECT_THAT(what, HasSubstr("(100001 characters)"));
  }
}

}  // namespace
}  // namespace sublinear::policy
