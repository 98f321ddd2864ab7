// `sublinear <command> [args]`: finds the command in kCommands and runs it.
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "integrations/cli/commands.hpp"
#include "sublinear/error.hpp"
#include "sublinear/version.h"

namespace {

void print_usage(std::FILE* to) {
  std::fprintf(to,
               "usage: sublinear <command> [arguments]\n"
               "\n"
               "Trains deep networks in a memory budget by evicting activations and replaying the\n"
               "kernels that produced them.\n"
               "\n"
               "commands:\n");
  for (const auto& c : sublinear::cli::kCommands) {
    std::fprintf(to, "  %-10.*s %.*s\n", static_cast<int>(c.name.size()), c.name.data(),
                 static_cast<int>(c.summary.size()), c.summary.data());
  }
  std::fprintf(to, "\n'sublinear <command> --help' describes a command's arguments; 'sublinear --version' prints\n"
                  "the version.\n");
}

std::string command_names() {
  std::string names;
  for (const auto& c : sublinear::cli::kCommands) {
    if (!names.empty()) names += ", ";
    names += c.name;
  }
  return names;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sublinear::cli;
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty()) {
    print_usage(stderr);
    return kExitUsage;
  }
  const std::string_view name = args.front();
  if (name == "-h" || name == "--help" || name == "help") {
    print_usage(stdout);
    return kExitOk;
  }
  if (name == "--version") {
    std::printf("sublinear %s\n", SUBLINEAR_VERSION_STRING);
    return kExitOk;
  }
  const command* found = nullptr;
  for (const auto& c : kCommands) {
    if (c.name == name) found = &c;
  }
  if (found == nullptr) {
    std::fprintf(stderr, "sublinear: unknown command '%.*s' (commands: %s; try 'sublinear --help')\n",
                 static_cast<int>(name.size()), name.data(), command_names().c_str());
    return kExitUsage;
  }
  const std::span<const std::string_view> rest(args.data() + 1, args.size() - 1);
  try {
    return found->run(rest);
  } catch (const sublinear::config_error& e) {
    std::fprintf(stderr, "sublinear %.*s: %s\n", static_cast<int>(name.size()), name.data(), e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sublinear %.*s: %s\n", static_cast<int>(name.size()), name.data(), e.what());
    return kExitFailure;
  }
}
