// Note [Own JSON] is in report_json.hpp.
#include "common/text.hpp"
#include "runtime/report/report_json.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "sublinear/error.hpp"

namespace sublinear::runtime::json {

// ---- value ----------------------------------------------------------------------------------------

value value::make_bool(bool b) {
  value v;
  v.kind_ = kind::boolean;
  v.bool_ = b;
  return v;
}

value value::make_number(double d) {
  value v;
  v.kind_ = kind::number;
  v.number_ = d;
  return v;
}

value value::make_string(std::string s) {
  value v;
  v.kind_ = kind::string;
  v.string_ = std::move(s);
  return v;
}

value value::make_array(array_type a) {
  value v;
  v.kind_ = kind::array;
  v.array_ = std::make_shared<array_type>(std::move(a));
  return v;
}

value value::make_object(object_type o) {
  value v;
  v.kind_ = kind::object;
  v.object_ = std::make_shared<object_type>(std::move(o));
  return v;
}

namespace {

const char* kind_name(value::kind k) {
  switch (k) {
    case value::kind::null: return "null";
    case value::kind::boolean: return "boolean";
    case value::kind::number: return "number";
    case value::kind::string: return "string";
    case value::kind::array: return "array";
    case value::kind::object: return "object";
  }
  return "?";
}

[[noreturn]] void wrong_kind(const char* expected, value::kind got) {
  throw config_error(std::string("JSON: expected ") + expected + ", got " + kind_name(got));
}

}  // namespace

bool value::is_integer() const noexcept {
  return kind_ == kind::number && std::isfinite(number_) && std::floor(number_) == number_;
}

bool value::as_bool() const {
  if (kind_ != kind::boolean) wrong_kind("boolean", kind_);
  return bool_;
}

double value::as_number() const {
  if (kind_ != kind::number) wrong_kind("number", kind_);
  return number_;
}

std::uint64_t value::as_size() const {
  // 2^64 and above have no uint64 (the cast would be undefined).
  if (!is_integer() || number_ < 0 || number_ >= 18446744073709551616.0) wrong_kind("non-negative integer", kind_);
  return static_cast<std::uint64_t>(number_);
}

const std::string& value::as_string() const {
  if (kind_ != kind::string) wrong_kind("string", kind_);
  return string_;
}

const value::array_type& value::as_array() const {
  if (kind_ != kind::array) wrong_kind("array", kind_);
  return *array_;
}

const value::object_type& value::as_object() const {
  if (kind_ != kind::object) wrong_kind("object", kind_);
  return *object_;
}

const value* value::find(std::string_view key) const noexcept {
  if (kind_ != kind::object) return nullptr;
  for (const auto& [k, v] : *object_)
    if (k == key) return &v;
  return nullptr;
}

const value& value::at(std::string_view key) const {
  const value* v = find(key);
  if (v == nullptr) throw config_error("JSON: missing member \"" + std::string(key) + "\"");
  return *v;
}

bool operator==(const value& a, const value& b) {
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case value::kind::null: return true;
    case value::kind::boolean: return a.bool_ == b.bool_;
    case value::kind::number: return a.number_ == b.number_;
    case value::kind::string: return a.string_ == b.string_;
    case value::kind::array: return *a.array_ == *b.array_;
    case value::kind::object: {
      // Member order does not matter to JSON.
      if (a.object_->size() != b.object_->size()) return false;
      for (const auto& [k, v] : *a.object_) {
        const value* other = b.find(k);
        if (other == nullptr || !(*other == v)) return false;
      }
      return true;
    }
  }
  return false;
}

// ---- parser ----------------------------------------------------------------------------------------

namespace {

constexpr int kMaxDepth = 256;

class parser {
 public:
  parser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  value document() {
    skip_space();
    value v = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw config_error(std::string(source_) + ":" + std::to_string(line) + ":" + std::to_string(column) +
                       ": invalid JSON: " + what);
  }

  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  bool consume(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  value parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    if (pos_ >= text_.size()) fail("unexpected end of input, expected a value");
    const char c = text_[pos_];
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') return value::make_string(parse_string());
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
    if (consume("true")) return value::make_bool(true);
    if (consume("false")) return value::make_bool(false);
    if (consume("null")) return value{};
    fail(std::string("unexpected character '") + c + "', expected a value");
  }

  value parse_object(int depth) {
    ++pos_;  // {
    value::object_type members;
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return value::make_object(std::move(members));
    }
    for (;;) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '"') fail("expected a member name in double quotes");
      std::string k = parse_string();
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != ':') fail("expected ':' after a member name");
      ++pos_;
      skip_space();
      members.emplace_back(std::move(k), parse_value(depth + 1));
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return value::make_object(std::move(members));
      }
      fail("expected ',' or '}' in an object");
    }
  }

  value parse_array(int depth) {
    ++pos_;  // [
    value::array_type items;
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return value::make_array(std::move(items));
    }
    for (;;) {
      skip_space();
      items.push_back(parse_value(depth + 1));
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return value::make_array(std::move(items));
      }
      fail("expected ',' or ']' in an array");
    }
  }

  unsigned hex4() {
    if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') {
        v |= static_cast<unsigned>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        v |= static_cast<unsigned>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        v |= static_cast<unsigned>(h - 'A' + 10);
      } else {
        fail("bad hex digit in a \\u escape");
      }
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string parse_string() {
    ++pos_;  // "
    std::string out;
    for (;;) {
      if (pos_ >= text_.size()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos_;
        fail("control character in a string (escape it)");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!consume("\\u")) fail("a high surrogate must be followed by a \\u low surrogate");
            const unsigned low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("bad low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("a low surrogate without a high one");
          }
          append_utf8(out, cp);
          break;
        }
        default: --pos_; fail(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  value parse_number() {
    const std::size_t start = pos_;
    if (text_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const std::size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - from;
    };
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
      if (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') fail("a number may not have leading zeros");
    } else if (digits() == 0) {
      fail("expected digits in a number");
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) fail("expected digits after '.'");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (digits() == 0) fail("expected digits in an exponent");
    }
    double d = 0.0;
    const auto [ptr, ec] = std::from_chars(text_.data() + start, text_.data() + pos_, d);
    if (ec == std::errc::result_out_of_range) {
      pos_ = start;
      fail("number out of range");
    }
    if (ec != std::errc() || ptr != text_.data() + pos_) {
      pos_ = start;
      fail("malformed number");
    }
    return value::make_number(d);
  }

  std::string_view text_;
  std::string_view source_;
  std::size_t pos_ = 0;
};

void dump_to(std::string& out, const value& v) {
  switch (v.type()) {
    case value::kind::null: out += "null"; break;
    case value::kind::boolean: out += v.as_bool() ? "true" : "false"; break;
    case value::kind::number: out += number(v.as_number()); break;
    case value::kind::string: out += quote(v.as_string()); break;
    case value::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v.as_array()) {
        if (!first) out += ',';
        first = false;
        dump_to(out, item);
      }
      out += ']';
      break;
    }
    case value::kind::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, item] : v.as_object()) {
        if (!first) out += ',';
        first = false;
        out += quote(k);
        out += ':';
        dump_to(out, item);
      }
      out += '}';
      break;
    }
  }
}

}  // namespace

value parse(std::string_view text, std::string_view source) { return parser(text, source).document(); }

std::string dump(const value& v) {
  std::string out;
  dump_to(out, v);
  return out;
}

std::string quote(std::string_view s) { return json_quote(s); }

std::string number(double d) {
  if (!std::isfinite(d)) return "null";
  char buf[32];
  if (std::floor(d) == d && std::fabs(d) < 9007199254740992.0) {
    const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, static_cast<std::int64_t>(d));
    return std::string(buf, ptr);
  }
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, d);  // shortest round trip
  return std::string(buf, ptr);
}

// ---- writer ----------------------------------------------------------------------------------------

void writer::newline() {
  out_ += '\n';
  out_.append(2 * stack_.size(), ' ');
}

void writer::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (stack_.empty()) return;
  level& l = stack_.back();
  if (!l.empty) out_ += l.one_line ? ", " : ",";
  if (!l.one_line) newline();
  l.empty = false;
}

void writer::key(std::string_view k) {
  before_value();
  out_ += quote(k);
  out_ += ": ";
  after_key_ = true;
}

void writer::open(char c, bool one_line) {
  before_value();
  out_ += c;
  // A container inside a one-line container stays on that line.
  const bool inherited = !stack_.empty() && stack_.back().one_line;
  stack_.push_back({one_line || inherited, true});
}

void writer::close(char c) {
  const level l = stack_.back();
  stack_.pop_back();
  if (!l.one_line && !l.empty) newline();
  out_ += c;
  if (stack_.empty()) out_ += '\n';
}

void writer::null() {
  before_value();
  out_ += "null";
}

void writer::boolean(bool b) {
  before_value();
  out_ += b ? "true" : "false";
}

void writer::number(double d) {
  before_value();
  out_ += json::number(d);
}

void writer::integer(std::uint64_t n) {
  before_value();
  char buf[24];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, n);
  out_.append(buf, ptr);
}

void writer::string(std::string_view s) {
  before_value();
  out_ += quote(s);
}

// ---- schema validation -----------------------------------------------------------------------------

namespace {

class validator {
 public:
  validator(const value& root, std::size_t max_errors) : root_(root), max_(max_errors) {}

  void check(const value& doc, const value& schema, const std::string& pointer) {
    if (errors.size() >= max_) return;
    if (schema.is_bool()) {
      if (!schema.as_bool()) report(pointer, "no value is allowed here");
      return;
    }
    if (!schema.is_object()) {
      report(pointer, "the schema is neither an object nor a boolean");
      return;
    }
    for (const auto& [k, s] : schema.as_object()) {
      if (k == "$ref") {
        check(doc, resolve(s.as_string(), pointer), pointer);
      } else if (k == "type") {
        check_type(doc, s, pointer);
      } else if (k == "enum") {
        bool found = false;
        for (const auto& option : s.as_array()) found = found || option == doc;
        if (!found) report(pointer, dump(doc) + " is not one of " + dump(s));
      } else if (k == "const") {
        if (!(s == doc)) report(pointer, dump(doc) + " is not " + dump(s));
      } else if (k == "minimum") {
        if (doc.is_number() && doc.as_number() < s.as_number())
          report(pointer, json::number(doc.as_number()) + " is below the minimum " + json::number(s.as_number()));
      } else if (k == "maximum") {
        if (doc.is_number() && doc.as_number() > s.as_number())
          report(pointer, json::number(doc.as_number()) + " is above the maximum " + json::number(s.as_number()));
      } else if (k == "required") {
        if (doc.is_object())
          for (const auto& name : s.as_array())
            if (doc.find(name.as_string()) == nullptr) report(pointer, "missing member \"" + name.as_string() + "\"");
      } else if (k == "properties") {
        if (doc.is_object())
          for (const auto& [name, member] : doc.as_object())
            if (const value* ms = s.find(name)) check(member, *ms, pointer + "/" + escape(name));
      } else if (k == "additionalProperties") {
        if (!doc.is_object()) continue;
        const value* props = schema.find("properties");
        for (const auto& [name, member] : doc.as_object()) {
          if (props != nullptr && props->find(name) != nullptr) continue;
          if (s.is_bool() && !s.as_bool()) {
            report(pointer, "unexpected member \"" + name + "\"");
          } else {
            check(member, s, pointer + "/" + escape(name));
          }
        }
      } else if (k == "items") {
        if (!doc.is_array()) continue;
        const auto& items = doc.as_array();
        for (std::size_t i = 0; i < items.size() && errors.size() < max_; ++i)
          check(items[i], s, pointer + "/" + std::to_string(i));
      } else if (k == "minItems") {
        if (doc.is_array() && doc.as_array().size() < s.as_size())
          report(pointer, "fewer than " + std::to_string(s.as_size()) + " items");
      } else if (k == "$schema" || k == "$id" || k == "$defs" || k == "title" || k == "description" ||
                 k == "format" || k == "examples" || k == "default" || k == "$comment") {
        // annotations
      } else {
        report(pointer, "the schema uses keyword \"" + k + "\", which this validator does not implement");
      }
    }
  }

  std::vector<std::string> errors;

 private:
  static std::string escape(const std::string& name) {
    std::string out;
    for (char c : name) {
      if (c == '~') {
        out += "~0";
      } else if (c == '/') {
        out += "~1";
      } else {
        out += c;
      }
    }
    return out;
  }

  const value& resolve(const std::string& ref, const std::string& pointer) {
    static const value nothing = value::make_bool(false);
    const std::string prefix = "#/$defs/";
    if (ref.rfind(prefix, 0) == 0) {
      if (const value* defs = root_.find("$defs"))
        if (const value* target = defs->find(ref.substr(prefix.size()))) return *target;
    }
    report(pointer, "unresolvable $ref \"" + ref + "\"");
    return nothing;
  }

  static bool has_type(const value& doc, const std::string& t) {
    if (t == "null") return doc.is_null();
    if (t == "boolean") return doc.is_bool();
    if (t == "integer") return doc.is_integer();
    if (t == "number") return doc.is_number();
    if (t == "string") return doc.is_string();
    if (t == "array") return doc.is_array();
    if (t == "object") return doc.is_object();
    return false;
  }

  void check_type(const value& doc, const value& t, const std::string& pointer) {
    if (t.is_string()) {
      if (!has_type(doc, t.as_string())) report(pointer, "expected " + t.as_string() + ", got " + kind_name(doc.type()));
      return;
    }
    for (const auto& option : t.as_array())
      if (has_type(doc, option.as_string())) return;
    report(pointer, "expected one of " + dump(t) + ", got " + kind_name(doc.type()));
  }

  void report(const std::string& pointer, const std::string& what) {
    if (errors.size() < max_) errors.push_back((pointer.empty() ? "/" : pointer) + ": " + what);
  }

  const value& root_;
  std::size_t max_;
};

}  // namespace

std::vector<std::string> validate(const value& doc, const value& schema, std::size_t max_errors) {
  validator v(schema, max_errors);
  v.check(doc, schema, "");
  return std::move(v.errors);
}

}  // namespace sublinear::runtime::json
