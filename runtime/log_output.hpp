// Where the runtime's log goes: stderr, or the file SUBLINEAR_LOG=LEVEL:PATH names.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

namespace sublinear::runtime {

// What a failed open of the log file `path` for appending says: the path, the reason
// (errno `err`, as a missing directory, a directory, an unwritable file or directory, a
// read-only file system) and the fix. `existed`: the file was there before the attempt.
[[nodiscard]] std::string log_file_error(const std::string& path, int err, bool existed);

class log_output {
 public:
  // Opens `path` for appending (created if missing; "" is stderr). Throws config_error
  // naming SUBLINEAR_LOG, the path and the reason when it cannot be opened.
  explicit log_output(const std::string& path);
  ~log_output();
  log_output(const log_output&) = delete;
  log_output& operator=(const log_output&) = delete;

  // Writes `line` and a newline, flushed. Never throws: a write to the file that fails
  // (a full disk) is reported once on stderr, and that line and every later one go to
  // stderr instead.
  void write(const std::string& line) noexcept;
  // The file, or "" for stderr.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;  // nullptr: stderr
  std::mutex mutex_;
};

}  // namespace sublinear::runtime
