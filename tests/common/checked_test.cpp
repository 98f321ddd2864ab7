// Overflow-checked arithmetic (common/checked.hpp): the figures of a trace, a report or a
// command line may be anything their type holds.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>

#include "common/checked.hpp"

namespace sublinear {
namespace {

constexpr std::size_t most = std::numeric_limits<std::size_t>::max();

TEST(Checked, AddAndMultiplyOnlyWhatFits) {
  EXPECT_EQ(checked_add<std::size_t>(most - 1, 1), most);
  EXPECT_FALSE(checked_add<std::size_t>(most, 1).has_value());
  EXPECT_EQ(checked_mul<std::uint64_t>(std::uint64_t{1} << 32, (std::uint64_t{1} << 32) - 1),
            (std::uint64_t{1} << 63) * 2 - (std::uint64_t{1} << 32));
  EXPECT_FALSE(checked_mul<std::uint64_t>(std::uint64_t{1} << 32, std::uint64_t{1} << 32).has_value());
  EXPECT_FALSE(checked_add<std::int64_t>(std::numeric_limits<std::int64_t>::max(), 1).has_value());
}

TEST(Checked, SaturatingArithmeticStopsAtTheLargestValue) {
  EXPECT_EQ(saturating_add<std::size_t>(most, most), most);
  EXPECT_EQ(saturating_add<std::size_t>(2, 3), 5u);
  EXPECT_EQ(saturating_mul<std::size_t>(most / 2, 3), most);
  EXPECT_EQ(saturating_mul<std::size_t>(most, 0), 0u);
}

}  // namespace
}  // namespace sublinear
