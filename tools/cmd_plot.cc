// `mixtrain plot LOG.jsonl [LOG2.jsonl ...] [--out=run.svg|run.png]`: draws the per-step logs of
// `mixtrain train --log-json` as one figure (loss raw and smoothed, learning rate, loss scale with
// the skipped steps marked, step time), one colour per log and a legend naming each file. The
// --out extension picks the format. Every log is read and the figure rendered before the output
// is created, and it is written atomically: on any error no file appears.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "mixtrain/status_macros.h"
#include "tools/cli.h"
#include "tools/plot_figure.h"
#include "tools/plot_log.h"

namespace mixtrain {
namespace {

absl::Status Plot(const cli::Args& args, cli::ImageFormat format) {
  const std::string out = args.str("out");
  std::vector<cli::FileArg> inputs;
  for (const std::string& path : args.positional()) inputs.push_back({"LOG.jsonl", path});
  MIXTRAIN_RETURN_IF_ERROR(cli::CheckFiles(inputs, {{"--out", out}}));
  std::vector<cli::TrainLog> logs;
  size_t steps = 0;
  for (const std::string& path : args.positional()) {
    MIXTRAIN_ASSIGN_OR_RETURN(cli::TrainLog log, cli::ReadTrainLog(path));
    steps += log.steps.size();
    logs.push_back(std::move(log));
  }
  const cli::FigureOptions options{.format = format,
                                   .width = static_cast<int>(args.integer("width")),
                                   .height = static_cast<int>(args.integer("height")),
                                   .smooth = args.number("smooth")};
  MIXTRAIN_ASSIGN_OR_RETURN(std::string image, cli::RenderFigure(logs, options));
  MIXTRAIN_RETURN_IF_ERROR(cli::AtomicOutputFile::Write("--out", out, image));
  std::printf("%zu logs, %zu steps drawn to %s\n", logs.size(), steps, out.c_str());
  return absl::OkStatus();
}

int RunPlot(const cli::Args& args) {
  // Usage errors exit 2, like a malformed flag.
  auto usage = [](const std::string& message) {
    std::fprintf(stderr, "mixtrain plot: %s\n", message.c_str());
    return 2;
  };
  if (args.positional().empty()) return usage("expects at least one LOG.jsonl (see --help)");
  const std::string out = args.str("out");
  const size_t dot = out.rfind('.');
  const std::string ext = dot == std::string::npos ? "" : absl::AsciiStrToLower(out.substr(dot));
  if (ext != ".svg" && ext != ".png")
    return usage(absl::StrCat("--out=", out, ": the extension picks the format and must be .svg or .png"));
  absl::Status s = Plot(args, ext == ".svg" ? cli::ImageFormat::kSvg : cli::ImageFormat::kPng);
  return s.ok() ? 0 : cli::Fail("plot", s);
}

MT_REGISTER_COMMAND(
    plot, cli::Command{
              .name = "plot",
              .usage = "mixtrain plot LOG.jsonl [LOG2.jsonl ...] [--out=run.svg|run.png]",
              .summary = "draw `train --log-json` logs: loss, learning rate, loss scale and skipped steps, step time",
              .flags =
                  {
                      {.name = "out", .default_value = "run.svg",
                       .help = "the image to write; its extension picks the format: .svg or .png"},
                      {.name = "smooth", .default_value = "0.9",
                       .help = "EMA factor of the thick loss curve drawn over the raw loss; 0 draws the raw "
                               "loss only"},
                      {.name = "width", .default_value = "1200", .help = "image width: pixels (PNG) or points (SVG)"},
                      {.name = "height", .default_value = "900", .help = "image height: pixels (PNG) or points (SVG)"},
                  },
              .run = RunPlot});

}  // namespace
}  // namespace mixtrain
