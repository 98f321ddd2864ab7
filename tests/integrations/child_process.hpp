// Running a program with a chosen environment and collecting what it printed: the preload
// library and `sublinear run` can only be tested from outside the process they load into.
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern char** environ;

namespace sublinear::testing {

struct child_result {
  int exit_code = -1;  // -1: did not exit normally
  int signal = 0;      // the signal that ended it, if one did
  std::string out, err;
};

// The directory holding this test binary (<build>/bin).
inline std::string bin_dir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<std::size_t>(n));
  return path.substr(0, path.rfind('/'));
}

// <build>/lib, where CMake puts the shared libraries.
inline std::string lib_dir() {
  const std::string bin = bin_dir();
  return bin.substr(0, bin.rfind('/')) + "/lib";
}

inline bool readable(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The current environment with `set` applied (NAME=VALUE replaces NAME) and the names in
// `unset` removed.
inline std::vector<std::string> environment_with(const std::vector<std::string>& set,
                                                 const std::vector<std::string>& unset = {}) {
  auto name_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv(*e);
    bool drop = false;
    for (const auto& s : set) drop = drop || name_of(s) == name_of(kv);
    for (const auto& u : unset) drop = drop || u == name_of(kv);
    if (!drop) env.push_back(kv);
  }
  env.insert(env.end(), set.begin(), set.end());
  return env;
}

// Runs argv[0] (a path) with `env`, waits, and returns its exit code and output.
inline child_result run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  child_result r;
  char out_path[] = "/tmp/sublinear-child-out-XXXXXX";
  char err_path[] = "/tmp/sublinear-child-err-XXXXXX";
  const int out_fd = ::mkstemp(out_path);
  const int err_fd = ::mkstemp(err_path);
  if (out_fd < 0 || err_fd < 0) return r;
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  ::posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  if (spawned == 0) {
    int status = 0;
    if (::waitpid(pid, &status, 0) == pid) {
      if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    }
  }
  ::close(out_fd);
  ::close(err_fd);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  ::unlink(out_path);
  ::unlink(err_path);
  return r;
}

// How many times `needle` occurs in `text`.
inline std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

}  // namespace sublinear::testing
