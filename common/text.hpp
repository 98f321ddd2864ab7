// Text helpers shared by every layer: byte counts for people, strings for JSON.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "sublinear/export.h"

namespace sublinear {

// "512 B", "1.50 KiB", "3.25 GiB": binary units, two decimals above 1 KiB.
SUBLINEAR_API std::string format_bytes(std::size_t bytes);

// format_bytes rounded up, never down, at its two decimals: a budget shown this way and
// given back (parse_budget reads "13.10 MiB") is at least `bytes`. "1.01 KiB" for 1025.
SUBLINEAR_API std::string format_bytes_at_least(std::size_t bytes);

// A value a user gave, for an error message: in single quotes, whole when at most `limit`
// characters; otherwise its first `limit` characters, "...", and its length.
SUBLINEAR_API std::string quote_bounded(std::string_view value, std::size_t limit = 64);

// `s` as a JSON string literal, quotes included, control characters escaped.
SUBLINEAR_API std::string json_quote(std::string_view s);

}  // namespace sublinear
