// `sublinear plan --model SPEC ...`: the budget preview of a PyTorch model captured on the
// meta device (docs/preview.md). The capture is Python (python/sublinear/capture.py), so
// this hands the arguments to `python -m sublinear.preview` in the user's Python, which
// writes a planning trace and calls this program back as `sublinear plan --trace` per budget.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "integrations/cli/commands.hpp"
#include "sublinear/error.hpp"

namespace sublinear::cli {
namespace {

std::string self_path() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n <= 0 ? std::string() : std::string(buf, static_cast<std::size_t>(n));
}

// Runs in the user's Python: finds the package beside this program (installed: <package>/bin;
// source tree: build/bin and python/), unless that Python already has it.
constexpr const char* kBootstrap =
    "import sys\n"
    "sys.path[:0] = [p for p in sys.argv[1].split(':') if p]\n"
    "try:\n"
    "    import sublinear.preview as preview\n"
    "except ImportError as e:\n"
    "    sys.exit('sublinear plan --model: this Python (' + sys.executable + ') cannot import the sublinear '\n"
    "             'package (' + str(e) + '); give the Python of your training environment with --python PATH')\n"
    "sys.exit(preview.main(sys.argv[2:]))\n";

}  // namespace

int plan_model_main(std::span<const std::string_view> args) {
  const std::string self = self_path();
  const std::string dir = self.substr(0, self.rfind('/'));
  // <site-packages>/sublinear/bin/sublinear, or <source>/build/bin/sublinear.
  const std::string search = dir + "/../.." + ":" + dir + "/../../python";
  // --python PATH chooses the Python (default python3 on PATH); the rest goes to Python.
  std::string python = "python3";
  std::vector<std::string> rest;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--python") {
      if (i + 1 == args.size()) throw config_error("--python needs the path of a Python with torch (try 'sublinear plan --model x --help')");
      python = std::string(args[++i]);
    } else if (args[i].rfind("--python=", 0) == 0) {
      python = std::string(args[i].substr(9));
    } else {
      rest.emplace_back(args[i]);
    }
  }
  std::vector<std::string> owned = {python, "-c", kBootstrap, search};
  owned.insert(owned.end(), rest.begin(), rest.end());
  if (!self.empty()) {
    owned.emplace_back("--cli");
    owned.push_back(self);
  }
  std::vector<char*> argv;
  for (std::string& s : owned) argv.push_back(s.data());
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  throw config_error("sublinear plan --model runs Python to capture the model, and '" + python +
                     "' cannot be started: " + std::strerror(errno) +
                     "; give the Python of your training environment (with torch) with --python PATH");
}

}  // namespace sublinear::cli
