// One reader for every subcommand's `--flag value` and `--flag=value` arguments (the
// subcommands here, `sublinear bench`'s among them, which the remat_sweeps program shares).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace sublinear::cli {

class arg_reader {
 public:
  // `bad` reports a usage error and does not return (it throws config_error).
  using bad_fn = std::function<void(const std::string& what)>;

  arg_reader(std::span<const std::string_view> args, bad_fn bad) : args_(args), bad_(std::move(bad)) {}

  // Moves to the next argument; false when there is none.
  bool next() {
    if (started_) ++index_;
    started_ = true;
    if (index_ >= args_.size()) return false;
    flag_ = args_[index_];
    has_value_ = false;
    if (const auto eq = flag_.find('='); flag_.starts_with("--") && eq != std::string_view::npos) {
      value_ = flag_.substr(eq + 1);
      flag_ = flag_.substr(0, eq);
      has_value_ = true;
    }
    return true;
  }

  // The flag, without an `=value` part.
  [[nodiscard]] std::string_view flag() const { return flag_; }
  // The argument as written.
  [[nodiscard]] std::string_view raw() const { return args_[index_]; }
  // The flag's value: after `=`, or the next argument.
  std::string_view value() {
    if (has_value_) return value_;
    if (index_ + 1 >= args_.size()) {
      bad_(std::string(flag_) + " needs a value");
      std::abort();  // bad_ throws; this line is never reached
    }
    return args_[++index_];
  }

 private:
  std::span<const std::string_view> args_;
  bad_fn bad_;
  std::size_t index_ = 0;
  bool started_ = false;
  std::string_view flag_;
  std::string_view value_;
  bool has_value_ = false;
};

}  // namespace sublinear::cli
