// The small JSON layer behind reports: a value type, a strict parser, a streaming writer,
// and a validator for the subset of JSON Schema that docs/report-schema.json uses.
//
// Note [Own JSON]
// Rationale: reports are written by a process that is training (possibly with a million
//   timeline events) and read back by `sublinear report`, and the schema must be checked in
//   CTest, in C++, on every machine we build on, including lent GPU machines that cannot
//   install packages. A few hundred lines of our own cost less than a build dependency.
// Approach: writing streams (no document tree), so a long timeline costs no memory beyond
//   its text. Reading builds a tree: a strict RFC 8259 parser (no comments, no trailing
//   commas, no NaN, nesting limited to 256 levels) whose errors say line and column.
//   Objects keep their members in file order. Numbers are doubles; byte counts stay exact
//   up to 2^53 (8 PiB). The schema validator knows: type (one or a list), enum, const,
//   minimum, maximum, required, properties, additionalProperties (boolean or schema),
//   items, minItems, $ref to "#/$defs/NAME", and ignores annotations ($schema, $id, title,
//   description, format, examples, default).
// Limitations: \u escapes outside the basic plane must come as surrogate pairs (as the
//   RFC says); a keyword outside the subset makes validation fail loudly rather than pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace sublinear::runtime::json {

class value {
 public:
  enum class kind : std::uint8_t { null, boolean, number, string, array, object };
  using array_type = std::vector<value>;
  using object_type = std::vector<std::pair<std::string, value>>;

  value() = default;
  static value make_bool(bool b);
  static value make_number(double d);
  static value make_string(std::string s);
  static value make_array(array_type a = {});
  static value make_object(object_type o = {});

  [[nodiscard]] kind type() const noexcept { return kind_; }
  [[nodiscard]] bool is_null() const noexcept { return kind_ == kind::null; }
  [[nodiscard]] bool is_bool() const noexcept { return kind_ == kind::boolean; }
  [[nodiscard]] bool is_number() const noexcept { return kind_ == kind::number; }
  [[nodiscard]] bool is_integer() const noexcept;  // a number with no fractional part
  [[nodiscard]] bool is_string() const noexcept { return kind_ == kind::string; }
  [[nodiscard]] bool is_array() const noexcept { return kind_ == kind::array; }
  [[nodiscard]] bool is_object() const noexcept { return kind_ == kind::object; }

  // Accessors throw config_error naming the expected kind when the value is another kind.
  [[nodiscard]] bool as_bool() const;
  [[nodiscard]] double as_number() const;
  [[nodiscard]] std::uint64_t as_size() const;  // a non-negative integer
  [[nodiscard]] const std::string& as_string() const;
  [[nodiscard]] const array_type& as_array() const;
  [[nodiscard]] const object_type& as_object() const;

  // Object member by key, or nullptr (also when this is not an object).
  [[nodiscard]] const value* find(std::string_view key) const noexcept;
  // Object member by key; throws config_error naming the key when it is missing.
  [[nodiscard]] const value& at(std::string_view key) const;

  friend bool operator==(const value& a, const value& b);

 private:
  kind kind_ = kind::null;
  bool bool_ = false;
  double number_ = 0.0;
  std::string string_;
  std::shared_ptr<array_type> array_;    // shared_ptr keeps value copyable and cheap to move
  std::shared_ptr<object_type> object_;
};

// Parses one JSON text (surrounding whitespace allowed). Throws config_error naming
// `source`, the line and column, and what was expected.
[[nodiscard]] value parse(std::string_view text, std::string_view source = "<json>");

// Compact text of a value (used for small pieces and tests).
[[nodiscard]] std::string dump(const value& v);

// A JSON string literal for `s` (quotes included; control characters escaped).
[[nodiscard]] std::string quote(std::string_view s);
// The shortest text that reads back as exactly `d`; integers without a fraction. NaN and
// infinities have no JSON form: they are written as null.
[[nodiscard]] std::string number(double d);

// Streams JSON text with commas and indentation handled. Containers opened `inline` stay
// on one line (timeline events, table rows); others put each member on its own line.
class writer {
 public:
  explicit writer(std::string& out) : out_(out) {}

  void begin_object(bool one_line = false) { open('{', one_line); }
  void end_object() { close('}'); }
  void begin_array(bool one_line = false) { open('[', one_line); }
  void end_array() { close(']'); }
  // The next value belongs to this key (inside an object).
  void key(std::string_view k);

  void null();
  void boolean(bool b);
  void number(double d);
  void integer(std::uint64_t n);
  void string(std::string_view s);

  // key + value, the common case.
  template <class T>
  void member(std::string_view k, const T& v) {
    key(k);
    if constexpr (std::is_same_v<T, bool>) {
      boolean(v);
    } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
      integer(v);
    } else if constexpr (std::is_arithmetic_v<T>) {
      number(static_cast<double>(v));
    } else {
      string(std::string_view(v));
    }
  }

 private:
  void open(char c, bool one_line);
  void close(char c);
  void before_value();
  void newline();

  struct level {
    bool one_line = false;
    bool empty = true;
  };
  std::string& out_;
  std::vector<level> stack_;
  bool after_key_ = false;
};

// ---- schema validation ------------------------------------------------------------------------

// Checks `doc` against `schema` (the subset in Note [Own JSON]). Returns one message per
// violation, each starting with the JSON pointer of the offending value ("/iterations/3/
// peak_mapped_bytes: expected integer, got string"); empty when the document is valid.
// At most `max_errors` messages are collected.
[[nodiscard]] std::vector<std::string> validate(const value& doc, const value& schema, std::size_t max_errors = 20);

}  // namespace sublinear::runtime::json
