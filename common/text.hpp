// Text helpers shared by every layer: byte counts for people, strings for JSON.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "sublinear/export.h"

namespace sublinear {

// "512 B", "1.50 KiB", "3.25 GiB": binary units, two decimals above 1 KiB.
SUBLINEAR_API std::string format_bytes(std::size_t bytes);

// `s` as a JSON string literal, quotes included, control characters escaped.
SUBLINEAR_API std::string json_quote(std::string_view s);

}  // namespace sublinear
