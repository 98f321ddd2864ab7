// `sublinear run [settings] -- COMMAND [ARGS...]`: runs a program with sublinear loaded into
// it, with the settings given as flags (Note [Run environment] in settings.hpp).
//
// Note [Run command]
// Rationale: zero code change means the user's training command runs as it is; all we may
//   do is choose its environment. Every mistake we can see (a malformed setting, an
//   unknown SUBLINEAR_ variable, a missing library) is reported before the command starts,
//   because a training job that starts without its budget fails an hour later.
// Approach: one flag per setting, generated from the options table (--budget for
//   SUBLINEAR_BUDGET, --trace-iterations for SUBLINEAR_TRACE_ITERATIONS, ...), so the
//   command line cannot drift from the table; compose_run_environment() validates and
//   builds the child's environment; the library must be sublinear's (Note [Preload
//   library check]); the command runs as a child whose exit status becomes this one's,
//   and which must load the library (Note [Run supervision]).
// Limitations: the preload/injection library must exist (by default at the install's
//   library directory relative to this program, or ../lib/, as the build tree, the Python
//   package and `cmake --install` lay it out); on a machine without it the command says
//   where it looked and how to get it.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/log_output.hpp"
#include "runtime/settings.hpp"
#include "integrations/cli/commands.hpp"
#include "integrations/cli/preload_check.hpp"
#include "integrations/cli/supervise.hpp"
#include "sublinear/error.hpp"

extern char** environ;

namespace sublinear::cli {
namespace {

constexpr const char* kLibraryName = "libsublinear_preload.so";
#ifndef SUBLINEAR_BIN_TO_LIB
#define SUBLINEAR_BIN_TO_LIB "../lib"
#endif

// `head` padded to the description column, then `body` wrapped at 90 columns.
std::string wrapped(const std::string& head, const std::string& body) {
  constexpr std::size_t column = 29, width = 90;
  std::string out = head;
  if (out.size() + 1 > column) {
    out += "\n";
    out += std::string(column, ' ');
  } else {
    out += std::string(column - out.size(), ' ');
  }
  std::size_t line = column;
  std::size_t i = 0;
  while (i < body.size()) {
    std::size_t end = body.find(' ', i);
    if (end == std::string::npos) end = body.size();
    const std::string word = body.substr(i, end - i);
    if (line > column && line + 1 + word.size() > width) {
      out += "\n" + std::string(column, ' ');
      line = column;
    }
    if (line > column) {
      out += ' ';
      ++line;
    }
    out += word;
    line += word.size();
    i = end + 1;
  }
  return out + "\n";
}

std::string help_text() {
  std::string h =
      "usage: sublinear run [settings] [--library PATH] [--print-env] -- COMMAND [ARGS...]\n"
      "\n"
      "Runs COMMAND with sublinear loaded into it (LD_PRELOAD and CUDA_INJECTION64_PATH name\n"
      "sublinear's library) and the settings below in its environment. Any program that\n"
      "allocates through the CUDA runtime works unchanged: python train.py, a C++ trainer, ...\n"
      "Settings already in the environment (SUBLINEAR_*) apply too; a flag wins over them.\n"
      "Every setting is checked before COMMAND starts: a malformed one is an error.\n"
      "\n"
      "settings (docs/settings.md):\n";
  for (const auto& o : runtime::options_table()) {
    const std::string flag = runtime::flag_name(o) + (o.boolean ? "" : " VALUE");
    std::string forms = std::string("Forms: ") + o.forms + ".";
    if (*o.default_value) forms += " Default " + std::string(o.default_value) + ".";
    h += wrapped("  " + flag, std::string(o.doc) + " " + forms);
  }
  h += "\nother options:\n" +
       wrapped("  --library PATH",
              "sublinear's preload/injection library; it must be libsublinear_preload.so of this version. Default: " +
                  std::string(SUBLINEAR_BIN_TO_LIB "/") + kLibraryName + " next to this program" +
                  (std::string_view(SUBLINEAR_BIN_TO_LIB) == "../lib" ? "." : ", else ../lib/" + std::string(kLibraryName) + ".")) +
      wrapped("  --print-env", "Print the variables sublinear sets for COMMAND, and exit without running it.") +
      "\n"
      "examples:\n"
      "  sublinear run --budget 8GiB -- python train.py\n"
      "  sublinear run --budget 0.5x --policy chain --report run.json -- ./trainer --epochs 1\n"
      "  SUBLINEAR_LOG=info sublinear run --budget 60% -- python train.py\n"
      "\n"
      "PyTorch's own caching allocator hides tensor frees from sublinear: COMMAND runs with\n"
      "PYTORCH_NO_CUDA_MEMORY_CACHING=1 unless the environment sets it already. Programs must\n"
      "use the shared CUDA runtime (nvcc -cudart shared). Per framework: docs/integrations.md.\n"
      "COMMAND runs as a child of sublinear run, which exits with its status, and fails a\n"
      "command that ran without loading sublinear (a static or setuid program).\n";
  return h;
}

[[noreturn]] void bad(const std::string& what) { throw config_error(what + " (try 'sublinear run --help')"); }

struct run_options {
  std::vector<std::pair<std::string, std::string>> settings;
  std::string library;
  bool print_env = false;
  std::vector<std::string> command;
};

run_options parse(std::span<const std::string_view> args) {
  run_options o;
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    std::string_view flag = args[i];
    if (flag == "--") {
      ++i;
      break;
    }
    if (!flag.starts_with("--")) {
      bad("expected a setting flag or '--' before the command, got '" + std::string(flag) +
          "'; write: sublinear run [settings] -- COMMAND");
    }
    std::string_view value;
    bool has_value = false;
    if (const auto eq = flag.find('='); eq != std::string_view::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    const auto next = [&]() -> std::string_view {
      if (has_value) return value;
      if (i + 1 >= args.size() || args[i + 1] == "--") bad(std::string(flag) + " needs a value");
      return args[++i];
    };
    if (flag == "--library") {
      o.library = std::string(next());
      if (o.library.empty()) bad("--library needs a file path");
    } else if (flag == "--print-env") {
      o.print_env = true;
    } else if (const runtime::option_info* opt = runtime::option_for_flag(flag)) {
      // A switch may stand alone; its value, if any, comes as --flag=VALUE.
      const std::string v = opt->boolean && !has_value ? "1" : std::string(next());
      o.settings.emplace_back(opt->name, v);
    } else {
      std::string flags;
      for (const auto& t : runtime::options_table()) flags += (flags.empty() ? "" : ", ") + runtime::flag_name(t);
      bad("unknown option '" + std::string(flag) + "'; the settings are " + flags +
          ", and the other options --library, --print-env");
    }
  }
  for (; i < args.size(); ++i) o.command.emplace_back(args[i]);
  return o;
}

std::string self_directory() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  std::string path(buf, static_cast<std::size_t>(n));
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

std::string find_library(const std::string& given) {
  if (!given.empty()) {
    if (::access(given.c_str(), R_OK) != 0) {
      throw error("the library given with --library, '" + given + "', cannot be read: " + std::strerror(errno));
    }
    if (const std::string problem = preload_library_problem(given); !problem.empty()) {
      throw config_error("--library: " + problem +
                         "; name sublinear's libsublinear_preload.so, or leave --library out to use the one "
                         "installed with this program");
    }
    return given;
  }
  // Note [Install layout] (CMakeLists.txt): the install's library directory relative to its
  // program directory, then ../lib (the build tree, the Python package).
  const std::string dir = self_directory();
  std::vector<std::string> candidates{dir + "/" SUBLINEAR_BIN_TO_LIB "/" + kLibraryName};
  if (std::string_view(SUBLINEAR_BIN_TO_LIB) != "../lib") candidates.push_back(dir + "/../lib/" + kLibraryName);
  for (const auto& candidate : candidates) {
    if (::access(candidate.c_str(), R_OK) != 0) continue;
    char resolved[PATH_MAX];
    const std::string path = ::realpath(candidate.c_str(), resolved) != nullptr ? std::string(resolved) : candidate;
    if (const std::string problem = preload_library_problem(path); !problem.empty()) {
      throw error(problem + "; rebuild or reinstall sublinear, or name its libsublinear_preload.so with --library");
    }
    return path;
  }
  std::string looked;
  for (const auto& c : candidates) looked += (looked.empty() ? "" : " and ") + c;
  throw error("sublinear's preload/injection library " + std::string(kLibraryName) + " is missing: looked for " +
              looked + " (next to this program, " + dir +
              "). Build it (cmake --build <build dir> --target sublinear_preload) or install sublinear "
              "(cmake --install), or name it with --library PATH.");
}

// Note [Log file check]
// Rationale: the runtime opens SUBLINEAR_LOG's file when the engine starts, inside COMMAND:
//   a path it cannot open is a config error there, after COMMAND has started (for a
//   training script, after its imports and data loading).
// Approach: open the file for appending, as the runtime will (created if missing, removed
//   again if this made it, so the check leaves nothing behind), and turn a failure into the
//   runtime's own error (runtime::log_file_error: the path, the reason, the fix).
//   O_NONBLOCK: a FIFO without a reader fails with ENXIO here instead of blocking; that is
//   left to COMMAND.
// Limitations: a file that becomes unwritable between the check and COMMAND's start is
//   still reported by the runtime, in COMMAND.
void check_log_file(const std::string& path) {
  if (path.empty()) return;
  const bool existed = ::access(path.c_str(), F_OK) == 0;
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666);
  if (fd >= 0) {
    ::close(fd);
    if (!existed) ::unlink(path.c_str());
    return;
  }
  const int err = errno;
  if (err != ENXIO) throw config_error(runtime::log_file_error(path, err, existed));
}

}  // namespace

int run_main(std::span<const std::string_view> args) {
  if (wants_help(args)) {
    // Only flags before '--' are ours: `sublinear run -- prog --help` asks prog.
    bool ours = false;
    for (auto a : args) {
      if (a == "--") break;
      if (a == "-h" || a == "--help") ours = true;
    }
    if (ours) {
      std::fputs(help_text().c_str(), stdout);
      return kExitOk;
    }
  }
  const run_options o = parse(args);
  if (o.command.empty() && !o.print_env) bad("no command given; write: sublinear run [settings] -- COMMAND [ARGS...]");

  std::vector<std::string> inherited;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) inherited.emplace_back(*e);
  runtime::run_environment env;
  std::string library;
  try {
    // Settings first: a malformed value is the error to show even when the library is missing.
    (void)runtime::compose_run_environment(inherited, o.settings, kLibraryName);
    library = find_library(o.library);
    env = runtime::compose_run_environment(inherited, o.settings, library);
    // What COMMAND would fail on at its start, before it starts (Note [Log file check]).
    if (!o.print_env) check_log_file(env.effective.log_file);
  } catch (const config_error& e) {
    std::string why = e.what();
    if (why.rfind("sublinear: ", 0) == 0) why = why.substr(11);  // main() names the command already
    throw config_error(why);
  }

  if (o.print_env) {
    // What sublinear sets or changes, not the whole environment.
    for (const auto& kv : env.variables) {
      if (kv.rfind("SUBLINEAR_", 0) == 0 || kv.rfind("LD_PRELOAD=", 0) == 0 ||
          kv.rfind("CUDA_INJECTION64_PATH=", 0) == 0 || kv.rfind("PYTORCH_NO_CUDA_MEMORY_CACHING=", 0) == 0)
        std::printf("%s\n", kv.c_str());
    }
    return kExitOk;
  }

  return run_supervised(o.command, env.variables, library);
}

}  // namespace sublinear::cli
