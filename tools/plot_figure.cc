// PLplot (Debian's libplplot) draws the figure. Its svg driver (in libplplot17) and pngcairo
// (plplot-driver-cairo) both run headless, and plsfile() hands either a FILE* of ours: the image
// goes into an open_memstream buffer, so the output file is written only by the caller, whole,
// through cli::AtomicOutputFile (plend() closes the stream it was given, so it cannot be that
// file's own).
#include "tools/plot_figure.h"

#include <plplot/plplot.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace mixtrain::cli {
namespace {

// Colour map 0: the page, the ink, the grid, then two entries per series colour (solid, and
// faint for the raw loss under its smoothed curve).
constexpr int kBackground = 0, kInk = 1, kGrid = 2, kFirstSeries = 3;
// Tableau's ten colours: told apart easily for the usual two or three runs, legible on white.
constexpr int kPalette[][3] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44},  {214, 39, 40},  {148, 103, 189},
                               {140, 86, 75},  {227, 119, 194}, {127, 127, 127}, {188, 189, 34}, {23, 190, 207}};
constexpr int kColours = sizeof(kPalette) / sizeof(kPalette[0]);
int Solid(size_t log) { return kFirstSeries + 2 * static_cast<int>(log % kColours); }
int Faint(size_t log) { return Solid(log) + 1; }

constexpr int kCross = 5;   // plpoin's code for an 'x'
constexpr int kCircle = 4;  // and for an 'o'

// '#' starts an escape sequence in PLplot text ("#u" superscript); a file name means it literally.
std::string PlText(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '#' ? std::string("##") : std::string(1, c);
  return out;
}

// The range of the finite values added, padded so the curve clears the frame; an empty range is
// [0, 1], a single value gets room around it.
struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void Add(double v) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  Range Padded() const {
    if (lo > hi) return {0, 1};
    const double pad = hi > lo ? 0.05 * (hi - lo) : lo != 0 ? 0.1 * std::abs(lo) : 1;
    return {lo - pad, hi + pad};
  }
};

using Column = std::vector<double>;

// One series' values per step (NaN for a null).
template <typename F>
Column Values(const TrainLog& log, F f) {
  Column out;
  for (const LogStep& s : log.steps) out.push_back(f(s));
  return out;
}

// The loss smoothed by an EMA that starts at the first finite loss and passes over nulls (as the
// trainer's progress line does), so a null is a gap in the raw curve only.
Column Smoothed(const Column& loss, double smooth) {
  Column out(loss.size(), NAN);
  double ema = NAN;
  for (size_t i = 0; i < loss.size(); ++i) {
    if (std::isfinite(loss[i])) ema = std::isnan(ema) ? loss[i] : smooth * ema + (1 - smooth) * loss[i];
    out[i] = ema;
  }
  return out;
}

// Draws the finite stretches of `y` over `x` as lines; a lone finite point between gaps as a dot.
void Curve(const Column& x, const Column& y, int colour, double width) {
  plcol0(colour);
  plwidth(width);
  for (size_t i = 0; i < y.size();) {
    if (!std::isfinite(y[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < y.size() && std::isfinite(y[end])) ++end;
    if (end - i == 1) plpoin(1, &x[i], &y[i], 17);  // 17: a filled dot
    else plline(static_cast<PLINT>(end - i), &x[i], &y[i]);
    i = end;
  }
}

// Crosses at `x`, all at height `y`s.
void Marks(const Column& x, const Column& y, int colour) {
  if (x.empty()) return;
  plcol0(colour);
  plwidth(1.5);
  plpoin(static_cast<PLINT>(x.size()), x.data(), y.data(), kCross);
}

// A panel: its frame, grid, labels and world coordinates; `y` in log10 units when `log_y`.
void Frame(double vx0, double vx1, double vy0, double vy1, Range x, Range y, bool log_y, const std::string& ylabel,
           const std::string& title) {
  plvpor(vx0, vx1, vy0, vy1);
  plwind(x.lo, x.hi, y.lo, y.hi);
  plcol0(kGrid);
  plwidth(0.5);
  plbox("g", 0, 0, log_y ? "gl" : "g", 0, 0);
  plcol0(kInk);
  plwidth(1);
  plbox("bcnst", 0, 0, log_y ? "bcnstlv" : "bcnstv", 0, 0);
  pllab("step", ylabel.c_str(), title.c_str());
}

// Fatal PLplot errors: the image is still in memory, so ending here leaves no file behind.
int OnPlplotExit(PLCHAR_VECTOR message) {
  std::fprintf(stderr, "mixtrain plot: PLplot: %s\n", message);
  std::fflush(stderr);
  _exit(1);
}
// Recoverable ones (a call PLplot refused and skipped): the figure would be incomplete.
std::string* plplot_errors = nullptr;
void OnPlplotAbort(PLCHAR_VECTOR message) {
  if (plplot_errors != nullptr) absl::StrAppend(plplot_errors, plplot_errors->empty() ? "" : "; ", message);
}

bool HasDevice(const std::string& name) {
  std::vector<PLCHAR_VECTOR> menu(256), names(256);
  PLCHAR_VECTOR* m = menu.data();
  PLCHAR_VECTOR* n = names.data();
  int count = static_cast<int>(names.size());
  plgDevs(&m, &n, &count);
  for (int i = 0; i < count; ++i)
    if (name == names[i]) return true;
  return false;
}

// The legend's names: basenames, or the paths as given where two logs share a basename.
std::vector<std::string> LegendNames(const std::vector<TrainLog>& logs) {
  std::map<std::string, int> uses;
  for (const TrainLog& l : logs) ++uses[l.name];
  std::vector<std::string> names;
  for (const TrainLog& l : logs) names.push_back(PlText(uses[l.name] > 1 ? l.path : l.name));
  return names;
}

void Legend(const std::vector<TrainLog>& logs, double text_scale) {
  const std::vector<std::string> names = LegendNames(logs);
  const PLINT n = static_cast<PLINT>(logs.size());
  std::vector<PLCHAR_VECTOR> text;
  std::vector<PLINT> opts(n, PL_LEGEND_LINE), colours, styles(n, 1), text_colours(n, kInk);
  std::vector<PLFLT> widths(n, 3.0);
  for (PLINT i = 0; i < n; ++i) text.push_back(names[i].c_str()), colours.push_back(Solid(i));
  plvpor(0.09, 0.98, 0.93, 0.995);
  plwind(0, 1, 0, 1);
  PLFLT w, h;
  pllegend(&w, &h, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX, PL_POSITION_VIEWPORT | PL_POSITION_TOP, 0, 0,
           0.05, kBackground, kGrid, 1, 1 + (n - 1) / 4, std::min<PLINT>(n, 4), n, opts.data(), 1.0, text_scale, 1.6, 0.0,
           text_colours.data(), text.data(), nullptr, nullptr, nullptr, nullptr, colours.data(), styles.data(),
           widths.data(), nullptr, nullptr, nullptr, nullptr);
}

}  // namespace

absl::StatusOr<std::string> RenderFigure(const std::vector<TrainLog>& logs, const FigureOptions& o) {
  const std::string device = o.format == ImageFormat::kSvg ? "svg" : "pngcairo";
  // Without its driver, plinit() would prompt on stdin for another device.
  if (!HasDevice(device))
    return absl::FailedPreconditionError(absl::StrCat(
        "PLplot has no '", device, "' driver here (Debian: libplplot17 has svg, plplot-driver-cairo pngcairo)"));
  plsexit(OnPlplotExit);
  std::string errors;
  plplot_errors = &errors;
  plsabort(OnPlplotAbort);

  // Ranges: steps shared by all panels; the loss over raw values; the loss scale in log10 units.
  Range steps, loss, lr, scale, ms;
  std::vector<Column> x(logs.size());
  for (size_t i = 0; i < logs.size(); ++i) {
    x[i] = Values(logs[i], [](const LogStep& s) { return static_cast<double>(s.step); });
    for (const LogStep& s : logs[i].steps) {
      steps.Add(s.step), loss.Add(s.loss), lr.Add(s.lr), ms.Add(s.ms);
      if (s.loss_scale > 0) scale.Add(std::log10(s.loss_scale));
    }
    for (const LogEval& e : logs[i].evals) steps.Add(e.step), loss.Add(e.Metric("loss"));
  }
  ms.Add(0);  // time from zero: a flat 11-12 ms would otherwise look like noise
  const Range sx = steps.lo < steps.hi ? Range{steps.lo, steps.hi} : steps.Padded();
  const Range sloss = loss.Padded(), slr = lr.Padded(), sms = ms.Padded();
  // One scale all run long (the usual bf16 or fp32 run): half a decade either side of it.
  const Range sscale = scale.lo == scale.hi ? Range{scale.lo - 0.5, scale.hi + 0.5} : scale.Padded();

  char* buf = nullptr;
  size_t size = 0;
  std::FILE* image = open_memstream(&buf, &size);
  if (image == nullptr) return absl::ResourceExhaustedError("cannot allocate the image buffer");
  plsdev(device.c_str());
  plsfile(image);
  plsetopt("geometry", absl::StrFormat("%dx%d", o.width, o.height).c_str());
  plscmap0n(kFirstSeries + 2 * kColours);
  plscol0(kBackground, 255, 255, 255);
  plscol0(kInk, 0, 0, 0);
  plscol0(kGrid, 210, 210, 210);
  for (int c = 0; c < kColours; ++c) {
    plscol0(kFirstSeries + 2 * c, kPalette[c][0], kPalette[c][1], kPalette[c][2]);
    plscol0a(kFirstSeries + 2 * c + 1, kPalette[c][0], kPalette[c][1], kPalette[c][2], 0.35);
  }
  plinit();
  pladv(0);
  // PLplot sizes text in millimetres of a page whose resolution is fixed: text that reads well at
  // the default 1200x900 grows and shrinks with the image, by the square root so a small image
  // keeps legible labels and a big one does not get tiny ones.
  const double text = 0.75 * std::clamp(std::sqrt(std::min(o.width / 1200.0, o.height / 900.0)), 0.5, 2.0);
  plschr(0, text);
  plssym(0, 1.3 * text);  // only the crosses and lone points are symbols

  // Top left: the loss, raw (thin, faint) under its EMA (thick); a null loss is a gap, marked by
  // a cross on the panel's floor.
  const bool evals = std::any_of(logs.begin(), logs.end(), [](const TrainLog& l) { return !l.evals.empty(); });
  const std::string loss_title = absl::StrCat(
      "loss (", o.smooth > 0 ? absl::StrCat("thin: raw, thick: EMA ", o.smooth, "; ") : "", "x: null",
      evals ? "; o, dashed: test loss" : "", ")");
  Frame(0.09, 0.48, 0.55, 0.88, sx, sloss, false, "loss", loss_title);
  for (size_t i = 0; i < logs.size(); ++i) {
    const Column raw = Values(logs[i], [](const LogStep& s) { return s.loss; });
    if (o.smooth > 0) {
      Curve(x[i], raw, Faint(i), 1.0);
      Curve(x[i], Smoothed(raw, o.smooth), Solid(i), 2.5);
    } else {
      Curve(x[i], raw, Solid(i), 1.5);
    }
    Column at, floor;
    for (size_t k = 0; k < raw.size(); ++k)
      if (!std::isfinite(raw[k])) at.push_back(x[i][k]), floor.push_back(sloss.lo);
    Marks(at, floor, Solid(i));
    // The validation curve: the test loss at each evaluation, dashed between circles.
    Column ex, ey;
    for (const LogEval& e : logs[i].evals) ex.push_back(static_cast<double>(e.step)), ey.push_back(e.Metric("loss"));
    if (ex.empty()) continue;
    pllsty(2);
    Curve(ex, ey, Solid(i), 2.0);
    pllsty(1);
    plpoin(static_cast<PLINT>(ex.size()), ex.data(), ey.data(), kCircle);
  }

  // Top right: the learning rate.
  Frame(0.59, 0.98, 0.55, 0.88, sx, slr, false, "learning rate", "learning rate");
  for (size_t i = 0; i < logs.size(); ++i)
    Curve(x[i], Values(logs[i], [](const LogStep& s) { return s.lr; }), Solid(i), 2.0);

  // Bottom left: the loss scale on a log axis; a cross at each skipped step (on the floor where
  // the step's scale is null).
  Frame(0.09, 0.48, 0.08, 0.41, sx, sscale, true, "loss scale", "loss scale (x: skipped step)");
  for (size_t i = 0; i < logs.size(); ++i) {
    const Column log_scale =
        Values(logs[i], [](const LogStep& s) { return s.loss_scale > 0 ? std::log10(s.loss_scale) : NAN; });
    Curve(x[i], log_scale, Solid(i), 2.0);
    Column at, height;
    for (size_t k = 0; k < log_scale.size(); ++k)
      if (logs[i].steps[k].skipped)
        at.push_back(x[i][k]), height.push_back(std::isfinite(log_scale[k]) ? log_scale[k] : sscale.lo);
    Marks(at, height, Solid(i));
  }

  // Bottom right: the step's wall time.
  Frame(0.59, 0.98, 0.08, 0.41, sx, sms, false, "ms", "step time (ms)");
  for (size_t i = 0; i < logs.size(); ++i)
    Curve(x[i], Values(logs[i], [](const LogStep& s) { return s.ms; }), Solid(i), 1.2);

  Legend(logs, 1.2 * text);  // pllegend scales PLplot's default text height, not plschr's
  plend();  // closes `image`: buf and size now hold the whole file
  plplot_errors = nullptr;
  std::string bytes(buf, size);
  std::free(buf);
  if (!errors.empty()) return absl::InternalError(absl::StrCat("PLplot: ", errors));
  if (bytes.empty()) return absl::InternalError(absl::StrCat("PLplot's ", device, " driver wrote nothing"));
  return bytes;
}

}  // namespace mixtrain::cli
