// Text helpers shared by the report renderers (report.cpp, report_plan.cpp).
#pragma once

#include <string>
#include <vector>

namespace sublinear::runtime::text {

// "12.3 us", "4.56 ms", "1.23 s"; "0" for zero.
[[nodiscard]] std::string seconds(double s);

// A plain table indented by two spaces: a header row, a rule of dashes, the rows. Columns
// are right-aligned except where `left` says otherwise; trailing spaces are trimmed.
[[nodiscard]] std::string table(const std::vector<std::string>& header,
                                const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& left);

}  // namespace sublinear::runtime::text
