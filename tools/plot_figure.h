// `mixtrain plot`'s figure: training logs drawn with PLplot as one page of four panels (loss,
// learning rate, loss scale with the skipped steps marked, step time), one colour per log.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/plot_log.h"

namespace mixtrain::cli {

enum class ImageFormat { kSvg, kPng };

struct FigureOptions {
  ImageFormat format = ImageFormat::kSvg;
  int width = 1200, height = 900;  // pixels for PNG, points for SVG
  double smooth = 0.9;             // EMA factor of the thick loss curve, in [0, 1); 0: raw only
};

// The image file's bytes, rendered in memory: nothing touches the disk, so the caller writes it
// atomically. PLplot is one process-wide state machine, so this runs once per process; an error
// PLplot deems fatal ends the process with exit code 1 (after the one-line message), which is
// safe because no output file exists yet.
absl::StatusOr<std::string> RenderFigure(const std::vector<TrainLog>& logs, const FigureOptions& options);

}  // namespace mixtrain::cli
