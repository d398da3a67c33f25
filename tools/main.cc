// mixtrain: train ONNX models with automatic mixed precision. Dispatches to the subcommands
// registered by tools/cmd_*.cc.
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "tools/cli.h"

namespace {

void PrintUsage(FILE* out) {
  std::fprintf(out,
               "usage: mixtrain <command> [args] [--flags]\n"
               "Train ONNX models with automatic mixed precision.\n\ncommands:\n");
  for (const auto& [name, c] : mixtrain::cli::Commands())
    std::fprintf(out, "  %-8s %s\n", name.c_str(), c.summary.c_str());
  std::fprintf(out, "\n`mixtrain <command> --help` lists a command's flags.\n");
}

// The dispatch; main() adds the last-resort handling of exceptions.
int Main(int argc, char** argv) {
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    PrintUsage(stdout);
    return 0;
  }
  if (cmd == "--version") cmd = "info";
  if (const std::string e = mixtrain::GetCpuInfo().cap_error; !e.empty() && cmd != "info") {
    std::fprintf(stderr, "mixtrain: %s\n", e.c_str());
    return 2;
  }
  const auto& cmds = mixtrain::cli::Commands();
  auto it = cmds.find(cmd);
  if (it == cmds.end()) {
    std::fprintf(stderr, "mixtrain: unknown command '%s'\n\n", cmd.c_str());
    PrintUsage(stderr);
    return 2;
  }
  std::vector<std::string> rest(argv + 2, argv + argc);
  auto args = mixtrain::cli::Args::Parse(rest, it->second.flags);
  if (!args.ok()) {
    std::fprintf(stderr, "mixtrain %s: %s\n", cmd.c_str(), std::string(args.status().message()).c_str());
    return 2;
  }
  if (args->help()) {
    std::fputs(mixtrain::cli::HelpText(it->second).c_str(), stdout);
    return 0;
  }
  return it->second.run(*args);
}

}  // namespace

// An allocation that fails anywhere in a command (a huge --batch-size, a memory limit) ends it
// with an error line, as any other error does, instead of std::terminate's abort; so does any
// other exception a library throws through a command.
int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  try {
    return Main(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "mixtrain %s: out of memory (a batch, model or data set too large for the memory "
                 "this process may use)\n", cmd.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixtrain %s: %s\n", cmd.c_str(), e.what());
  }
  return 1;
}
