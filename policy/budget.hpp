// Budget semantics: what SUBLINEAR_BUDGET (and --budget) accept, and how a budget that no
// plan can meet is reported.
//
// Note [Budget forms]
// Rationale: users think of budgets in three ways: a byte count ("8GiB"), a share of the
//   card ("60%"), or a share of what training needs now ("0.5x"). All three are accepted,
//   and nothing is guessed: a value in any other form is an error that lists these forms.
// Approach: a number (digits, an optional fraction, no sign, no exponent) followed, after
//   optional spaces, by one suffix:
//     (none) or B           bytes
//     KiB MiB GiB TiB       binary multiples: 2^10, 2^20, 2^30, 2^40
//     KB  MB  GB  TB        decimal multiples: 10^3, 10^6, 10^9, 10^12 (as disks, networks
//                           and nvidia-smi's "MiB"-free output use them; GB is never 2^30)
//     %                     percent of the device's memory, in (0, 100]
//     x                     a multiple of the traced peak, > 0 (1.5x is allowed)
//   Unit letters are matched case-insensitively ("8gib" = "8GiB"; "8 gb" = 8*10^9). Byte
//   counts are rounded down to a whole byte. Zero, and anything that rounds to zero bytes,
//   is rejected. Single-letter suffixes ("8G") are rejected as ambiguous.
// Limitations: relative forms need their reference at resolve time: the device capacity
//   for "%" (unknown on a machine without a device) and the traced peak for "x" (unknown
//   before the first iteration); resolving without it is an error that says so.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "sublinear/error.hpp"
#include "sublinear/export.h"

namespace sublinear::policy {

struct budget_spec {
  enum class kind { bytes, device_fraction, peak_fraction };
  kind form = kind::bytes;
  std::size_t bytes = 0;   // kind::bytes
  double fraction = 0.0;   // device_fraction: 0.6 for "60%"; peak_fraction: 0.5 for "0.5x"
  double number = 0.0;     // the number as written (60 for "60%"), for exact arithmetic
  std::string text;        // as given, for messages
};

// Parses one budget value. Throws sublinear::config_error naming the value and the
// accepted forms when it is malformed.
[[nodiscard]] budget_spec parse_budget(std::string_view text);

// Turns a parsed budget into bytes. `device_capacity` is needed for "%", `traced_peak`
// for "x"; pass 0 when unknown (resolving a form that needs it then throws config_error).
[[nodiscard]] std::size_t resolve_budget(const budget_spec& spec, std::size_t device_capacity,
                                         std::size_t traced_peak);

// parse_budget + resolve_budget.
[[nodiscard]] std::size_t parse_budget_bytes(std::string_view text, std::size_t device_capacity,
                                             std::size_t traced_peak);

// A budget below what a planner can reach. The message names the planner, the budget, and
// the smallest budget this planner is known to meet; smallest_feasible() returns it.
// lower_bound() is what no plan of any planner can go below (the bytes that must stay
// mapped during the most demanding launch).
class SUBLINEAR_API infeasible_budget : public config_error {
 public:
  // `why`, when given, is appended to the message (what limited the planner).
  infeasible_budget(std::string_view planner, std::size_t budget, std::size_t smallest_feasible,
                    std::size_t lower_bound, std::string_view why = {});

  [[nodiscard]] std::size_t budget() const noexcept { return budget_; }
  [[nodiscard]] std::size_t smallest_feasible() const noexcept { return smallest_feasible_; }
  [[nodiscard]] std::size_t lower_bound() const noexcept { return lower_bound_; }

 private:
  std::size_t budget_;
  std::size_t smallest_feasible_;
  std::size_t lower_bound_;
};

}  // namespace sublinear::policy
