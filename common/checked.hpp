// Overflow-checked integer arithmetic, for figures that come from outside the process (a
// trace file, a report, a command line): a sum or product that does not fit is either an
// error the caller reports or, where the figure is only shown or compared, the largest
// value of the type.
#pragma once

#include <limits>
#include <optional>
#include <type_traits>

namespace sublinear {

// a + b, or nothing when it does not fit in T.
template <class T>
[[nodiscard]] constexpr std::optional<T> checked_add(T a, T b) noexcept {
  static_assert(std::is_integral_v<T>);
  T r{};
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a * b, or nothing when it does not fit in T.
template <class T>
[[nodiscard]] constexpr std::optional<T> checked_mul(T a, T b) noexcept {
  static_assert(std::is_integral_v<T>);
  T r{};
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a + b for unsigned T, at most T's largest value.
template <class T>
[[nodiscard]] constexpr T saturating_add(T a, T b) noexcept {
  static_assert(std::is_unsigned_v<T>);
  return checked_add(a, b).value_or(std::numeric_limits<T>::max());
}

// a * b for unsigned T, at most T's largest value.
template <class T>
[[nodiscard]] constexpr T saturating_mul(T a, T b) noexcept {
  static_assert(std::is_unsigned_v<T>);
  return checked_mul(a, b).value_or(std::numeric_limits<T>::max());
}

}  // namespace sublinear
