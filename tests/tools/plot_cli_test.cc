// `mixtrain plot` end to end: two small `train --log-json` logs (an fp32-like run, and an fp16-like
// one with skipped steps and a null loss) drawn to SVG and PNG. The SVG is well-formed XML with the
// requested size, curves in both runs' colours, crosses for the skipped steps and the null loss,
// the legend's file names and the axis titles; the PNG has a valid signature, chunk CRCs and IHDR
// of the requested size, and its pixels show both runs' colours on white. Bad logs (garbage line,
// empty, missing) and flags fail with one "mixtrain plot:" line naming FILE:LINE where there is a
// line, and leave no file (nor temp file) behind, an existing one untouched.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/tools/cli_test_util.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
using cli_test::kBinary;
using cli_test::Result;

// The first two colours of the plot's palette, as PLplot's svg driver writes them.
const char kFirstRun[] = "#1F77B4";
const char kSecondRun[] = "#FF7F0E";

// A log like `train --log-json` writes. `amp`: loss scale 65536 halved at the skipped steps 10 and
// 25, and a null loss at step 17 (the gaps and crosses the plot must show) unless `clean`.
std::string MakeLog(int steps, bool amp, bool clean = false) {
  std::string out;
  double scale = amp ? 65536 : 1;
  for (int s = 1; s <= steps; ++s) {
    const bool skipped = amp && !clean && (s == 10 || s == 25);
    const std::string loss = amp && !clean && s == 17
                                 ? "null"
                                 : absl::StrFormat("%.6g", 2.0 * std::exp(-s / 15.0) + 0.3 + 0.05 * (s % 3));
    const double lr = 0.001 * 0.5 * (1 + std::cos(M_PI * s / steps));
    absl::StrAppendFormat(&out,
                          "{\"step\": %d, \"loss\": %s, \"loss_scale\": %g, \"skipped\": %s, \"lr\": %.8g, "
                          "\"ms\": %.4f}\n",
                          s, loss, scale, skipped ? "true" : "false", lr, amp ? 8.0 + s % 5 : 20.0 + s % 7);
    if (skipped) scale /= 2;
  }
  return out;
}

// --- a small XML reader: well-formed nesting, attributes, and the characters of each element ----

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;  // the decoded characters inside it, its children's included
};

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | cp >> 6), *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | cp >> 12), *out += static_cast<char>(0x80 | (cp >> 6 & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | cp >> 18), *out += static_cast<char>(0x80 | (cp >> 12 & 0x3F));
    *out += static_cast<char>(0x80 | (cp >> 6 & 0x3F)), *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Character data with its entities replaced; false on a bare '<' or an unknown entity.
bool DecodeXml(const std::string& s, std::string* out) {
  static const std::map<std::string, char> kNamed = {{"lt", '<'}, {"gt", '>'}, {"amp", '&'}, {"quot", '"'}, {"apos", '\''}};
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') return false;
    if (s[i] != '&') {
      *out += s[i];
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string::npos) return false;
    const std::string ref = s.substr(i + 1, semi - i - 1);
    if (auto it = kNamed.find(ref); it != kNamed.end()) {
      *out += it->second;
    } else if (ref.size() > 1 && ref[0] == '#') {
      const bool hex = ref[1] == 'x';
      const std::string digits = ref.substr(hex ? 2 : 1);
      if (digits.empty() || digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") != std::string::npos)
        return false;
      AppendUtf8(static_cast<uint32_t>(std::stoul(digits, nullptr, hex ? 16 : 10)), out);
    } else {
      return false;
    }
    i = semi;
  }
  return true;
}

// Every element in document order; an empty `error` means the document is well-formed: one root,
// every start tag closed by a matching end tag in order, attributes quoted and not repeated.
std::vector<XmlElement> ParseXml(const std::string& s, std::string* error) {
  std::vector<XmlElement> elements;
  std::vector<size_t> open;
  bool had_root = false;
  auto fail = [&](const std::string& what, size_t at) {
    *error = absl::StrCat(what, " at byte ", at);
    return elements;
  };
  auto is_name = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':' || c == '-' || c == '.';
  };
  auto skip_space = [&](size_t i) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    return i;
  };
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] != '<') {
      const size_t end = std::min(s.find('<', i), s.size());
      std::string text;
      if (!DecodeXml(s.substr(i, end - i), &text)) return fail("bad character data", i);
      if (open.empty() && text.find_first_not_of(" \t\r\n") != std::string::npos) return fail("text outside the root", i);
      for (size_t e : open) elements[e].text += text;
      i = end;
      continue;
    }
    // Declarations, processing instructions and comments hold no elements.
    const std::vector<std::pair<std::string, std::string>> skipped = {{"<?", "?>"}, {"<!--", "-->"}, {"<!", ">"}};
    for (const auto& [begin, end] : skipped) {
      if (s.compare(i, begin.size(), begin) != 0) continue;
      const size_t close = s.find(end, i + begin.size());
      if (close == std::string::npos) return fail("unterminated " + begin, i);
      i = close + end.size();
      break;
    }
    if (i >= s.size() || s[i] != '<') continue;
    if (s.compare(i, 2, "</") == 0) {
      size_t j = i + 2;
      while (j < s.size() && is_name(s[j])) ++j;
      const std::string name = s.substr(i + 2, j - i - 2);
      j = skip_space(j);
      if (j >= s.size() || s[j] != '>') return fail("bad end tag", i);
      if (open.empty() || elements[open.back()].name != name)
        return fail("</" + name + "> closes " + (open.empty() ? "nothing" : "<" + elements[open.back()].name + ">"), i);
      open.pop_back();
      i = j + 1;
      continue;
    }
    if (open.empty() && had_root) return fail("a second root element", i);
    XmlElement e;
    size_t j = i + 1;
    while (j < s.size() && is_name(s[j])) ++j;
    e.name = s.substr(i + 1, j - i - 1);
    if (e.name.empty()) return fail("bad start tag", i);
    bool self_closing = false;
    while (true) {
      j = skip_space(j);
      if (j >= s.size()) return fail("unterminated <" + e.name + ">", i);
      if (s[j] == '>') break;
      if (s.compare(j, 2, "/>") == 0) {
        self_closing = true, ++j;
        break;
      }
      const size_t name_begin = j;
      while (j < s.size() && is_name(s[j])) ++j;
      const std::string attr = s.substr(name_begin, j - name_begin);
      j = skip_space(j);
      if (attr.empty() || j >= s.size() || s[j] != '=') return fail("bad attribute in <" + e.name + ">", j);
      j = skip_space(j + 1);
      if (j >= s.size() || (s[j] != '"' && s[j] != '\'')) return fail("unquoted attribute " + attr, j);
      const size_t close = s.find(s[j], j + 1);
      if (close == std::string::npos) return fail("unterminated attribute " + attr, j);
      std::string value;
      if (!DecodeXml(s.substr(j + 1, close - j - 1), &value)) return fail("bad attribute value " + attr, j);
      if (!e.attrs.emplace(attr, value).second) return fail("repeated attribute " + attr, j);
      j = close + 1;
    }
    had_root = true;
    elements.push_back(std::move(e));
    if (!self_closing) open.push_back(elements.size() - 1);
    i = j + 1;
  }
  if (!open.empty()) return fail("<" + elements[open.back()].name + "> never closed", s.size());
  if (!had_root) return fail("no root element", 0);
  return elements;
}

// --- a small PNG reader: chunks with CRCs, IHDR, and the unfiltered pixels -----------------------

struct Png {
  uint32_t width = 0, height = 0;
  std::vector<uint32_t> pixels;  // 0xRRGGBB, alpha dropped
};

uint32_t BigEndian(const std::string& s, size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(s[at])) << 24 | static_cast<unsigned char>(s[at + 1]) << 16 |
         static_cast<unsigned char>(s[at + 2]) << 8 | static_cast<unsigned char>(s[at + 3]);
}

// Reads an 8-bit RGB or RGBA non-interlaced PNG (what cairo writes); `error` says why not.
Png ReadPng(const std::string& s, std::string* error) {
  Png png;
  if (s.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return *error = "no PNG signature", png;
  std::string idat;
  int channels = 0;
  bool ended = false;
  for (size_t at = 8; at < s.size() && !ended;) {
    if (at + 12 > s.size()) return *error = "truncated chunk", png;
    const uint32_t len = BigEndian(s, at);
    if (at + 12 + len > s.size()) return *error = "chunk past the end", png;
    const std::string type = s.substr(at + 4, 4), data = s.substr(at + 8, len);
    const uLong crc = crc32(crc32(0, reinterpret_cast<const Bytef*>(type.data()), 4),
                            reinterpret_cast<const Bytef*>(data.data()), len);
    if (crc != BigEndian(s, at + 8 + len)) return *error = "bad CRC in " + type, png;
    if (at == 8 && type != "IHDR") return *error = "first chunk is " + type, png;
    if (type == "IHDR") {
      png.width = BigEndian(data, 0), png.height = BigEndian(data, 4);
      const int depth = data[8], colour = data[9], interlace = data[12];
      channels = colour == 2 ? 3 : colour == 6 ? 4 : 0;
      if (depth != 8 || channels == 0 || interlace != 0)
        return *error = absl::StrCat("unexpected depth ", depth, " colour type ", colour), png;
    }
    if (type == "IDAT") idat += data;
    ended = type == "IEND";
    at += 12 + len;
  }
  if (!ended) return *error = "no IEND", png;
  const size_t stride = 1 + png.width * channels;
  std::vector<unsigned char> raw(stride * png.height);
  uLongf raw_len = raw.size();
  if (uncompress(raw.data(), &raw_len, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK ||
      raw_len != raw.size())
    return *error = "IDAT does not inflate to the image size", png;
  // Undo each row's filter (PNG spec, section 9): a byte's left, up and upper-left neighbours.
  std::vector<unsigned char> prev(png.width * channels, 0), row(png.width * channels);
  for (uint32_t y = 0; y < png.height; ++y) {
    const unsigned char filter = raw[y * stride];
    for (size_t x = 0; x < row.size(); ++x) {
      const int a = x >= static_cast<size_t>(channels) ? row[x - channels] : 0, b = prev[x];
      const int c = x >= static_cast<size_t>(channels) ? prev[x - channels] : 0;
      const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
      const int predictor = filter == 0 ? 0 : filter == 1 ? a : filter == 2 ? b : filter == 3 ? (a + b) / 2
                            : pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      if (filter > 4) return *error = absl::StrCat("bad filter ", filter, " in row ", y), png;
      row[x] = static_cast<unsigned char>(raw[y * stride + 1 + x] + predictor);
    }
    for (uint32_t x = 0; x < png.width; ++x)
      png.pixels.push_back(row[x * channels] << 16 | row[x * channels + 1] << 8 | row[x * channels + 2]);
    prev = row;
  }
  return png;
}

uint32_t Rgb(const char* hex) { return static_cast<uint32_t>(std::stoul(hex + 1, nullptr, 16)); }

// --- the tests -----------------------------------------------------------------------------------

class PlotCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kBinary)) << kBinary << " is not built (ninja mixtrain)";
    dir_ = cli_test::ScratchDir("mt_plot_cli");
    fs::create_directories(dir_ / "out");
    Write("fp32.jsonl", MakeLog(40, false));
    Write("amp.jsonl", MakeLog(40, true));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  void Write(const std::string& name, const std::string& text) const { std::ofstream(Path(name)) << text; }
  std::string Read(const std::string& name) const {
    std::ifstream f(Path(name), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  Result Plot(const std::string& args) { return cli_test::RunShell("timeout 60 " + kBinary + " plot " + args, dir_); }
  std::vector<std::string> OutputsLeft() const {
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(dir_ / "out")) left.push_back(e.path().filename().string());
    return left;
  }
  // A failing run: exit `code`, one "mixtrain plot: " line holding `needle`, nothing in out/.
  void ExpectError(const std::string& args, int code, const std::string& needle) {
    SCOPED_TRACE(args);
    Result r = Plot(args + " --out=" + Path("out/run.svg"));
    EXPECT_EQ(r.code, code) << r.err;
    EXPECT_EQ(r.err.rfind("mixtrain plot: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_TRUE(OutputsLeft().empty()) << "left behind: " << OutputsLeft()[0];
  }
  // The SVG's elements, after checking it is well-formed.
  std::vector<XmlElement> Svg(const std::string& name) {
    std::string error;
    std::vector<XmlElement> elements = ParseXml(Read(name), &error);
    EXPECT_EQ(error, "") << name << " is not well-formed XML";
    return elements;
  }
  static std::string Attr(const XmlElement& e, const std::string& name) {
    auto it = e.attrs.find(name);
    return it == e.attrs.end() ? "" : it->second;
  }
  // Lines in `colour`; `faint`: only the see-through ones (the raw loss under its EMA).
  static int Strokes(const std::vector<XmlElement>& svg, const std::string& colour, bool faint = false) {
    int n = 0;
    for (const XmlElement& e : svg)
      n += e.name == "polyline" && Attr(e, "stroke") == colour && (!faint || Attr(e, "stroke-opacity") == "0.350000");
    return n;
  }
  // Crosses in `colour`: PLplot's svg driver draws a marker as its Unicode glyph, U+00D7.
  static int Crosses(const std::vector<XmlElement>& svg, const std::string& colour) {
    int n = 0;
    for (const XmlElement& e : svg) n += e.name == "text" && Attr(e, "fill") == colour && e.text == "\u00d7";
    return n;
  }

  fs::path dir_;
};

TEST_F(PlotCli, SvgHasEverySeriesTheLegendAndTheAxisTitles) {
  Result r = Plot(Path("fp32.jsonl") + " " + Path("amp.jsonl") + " --out=" + Path("out/cmp.svg") +
                  " --width=1000 --height=750");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 logs, 80 steps drawn to"), std::string::npos) << r.out;
  EXPECT_EQ(OutputsLeft(), std::vector<std::string>{"cmp.svg"});  // and no temp file
  const std::vector<XmlElement> svg = Svg("out/cmp.svg");
  ASSERT_FALSE(svg.empty());
  EXPECT_EQ(svg[0].name, "svg");
  EXPECT_EQ(svg[0].attrs.at("width"), "1000pt");
  EXPECT_EQ(svg[0].attrs.at("height"), "750pt");
  std::multiset<std::string> texts;
  for (const XmlElement& e : svg)
    if (e.name == "text") texts.insert(e.text);
  for (const char* t : {"fp32.jsonl", "amp.jsonl", "step", "loss", "learning rate", "loss scale", "ms",
                        "step time (ms)", "loss scale (x: skipped step)"})
    EXPECT_TRUE(texts.count(t)) << "no text '" << t << "' in the SVG";
  EXPECT_EQ(texts.count("step"), 4u) << "each panel's x axis is the step";
  // Each run has a curve in its colour in the four panels, plus the raw loss and its legend line.
  EXPECT_GE(Strokes(svg, kFirstRun), 6);
  EXPECT_GE(Strokes(svg, kSecondRun), 6);
  // The second run's two skipped steps and one null loss are crosses; the first run has none.
  EXPECT_EQ(Crosses(svg, kFirstRun), 0);
  EXPECT_EQ(Crosses(svg, kSecondRun), 3);
}

TEST_F(PlotCli, SkippedStepsAndNullLossesAreMarked) {
  // The same run without skipped steps and null loss: its crosses and the gap in the loss go.
  Write("clean.jsonl", MakeLog(40, true, /*clean=*/true));
  ASSERT_EQ(Plot(Path("amp.jsonl") + " --out=" + Path("out/marked.svg")).code, 0);
  ASSERT_EQ(Plot(Path("clean.jsonl") + " --out=" + Path("out/clean.svg")).code, 0);
  // One run: its colour is the first. Two skipped steps and one null loss: three crosses, and the
  // raw loss split in two at the null.
  const std::vector<XmlElement> marked = Svg("out/marked.svg"), clean = Svg("out/clean.svg");
  EXPECT_EQ(Crosses(marked, kFirstRun), 3);
  EXPECT_EQ(Crosses(clean, kFirstRun), 0);
  EXPECT_EQ(Strokes(marked, kFirstRun, /*faint=*/true), 2);
  EXPECT_EQ(Strokes(clean, kFirstRun, /*faint=*/true), 1);
}

TEST_F(PlotCli, PngHasTheRequestedSizeAndBothRunsColours) {
  Result r = Plot(Path("fp32.jsonl") + " " + Path("amp.jsonl") + " --out=" + Path("out/cmp.png") +
                  " --width=640 --height=480");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(OutputsLeft(), std::vector<std::string>{"cmp.png"});
  std::string error;
  const Png png = ReadPng(Read("out/cmp.png"), &error);
  ASSERT_EQ(error, "");
  EXPECT_EQ(png.width, 640u);
  EXPECT_EQ(png.height, 480u);
  std::map<uint32_t, int64_t> count;
  for (uint32_t p : png.pixels) ++count[p];
  EXPECT_GT(count.size(), 10u) << "lines, text and anti-aliasing give many colours";
  EXPECT_GT(count[0xFFFFFF], png.pixels.size() / 2) << "a white page";
  EXPECT_GT(count[Rgb(kFirstRun)], 100) << "the first run's curves";
  EXPECT_GT(count[Rgb(kSecondRun)], 100) << "the second run's curves";
  int64_t dark = 0;  // the axes and text: black, anti-aliased
  for (const auto& [rgb, n] : count) dark += (rgb >> 16) < 0x60 && (rgb >> 8 & 0xFF) < 0x60 && (rgb & 0xFF) < 0x60 ? n : 0;
  EXPECT_GT(dark, 2000) << "the axes and text";
}

TEST_F(PlotCli, DefaultOutputIsRunSvgInTheCurrentFolder) {
  Result r = cli_test::RunShell("cd " + (dir_ / "out").string() + " && timeout 60 " + kBinary + " plot " +
                                    Path("fp32.jsonl"), dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(OutputsLeft(), std::vector<std::string>{"run.svg"});
  Svg("out/run.svg");
}

// `train --eval-every` rows ({"step", "epoch", "eval_*"}) among the steps: the test loss is drawn
// as the validation curve and named in the loss panel's title; a bad figure names its line.
TEST_F(PlotCli, EvaluationRowsDrawTheValidationCurve) {
  std::string log = MakeLog(20, false);
  for (int s : {5, 10, 15, 20})
    log += absl::StrFormat("{\"step\": %d, \"epoch\": 1, \"eval_loss\": %g, \"eval_top1\": 0.5, \"eval_examples\": 64}\n", s,
                           1.0 - s / 40.0);
  Write("eval.jsonl", log);
  Result r = Plot(Path("eval.jsonl") + " --out=" + Path("out/eval.svg"));
  ASSERT_EQ(r.code, 0) << r.err;
  std::multiset<std::string> texts;
  for (const XmlElement& e : Svg("out/eval.svg"))
    if (e.name == "text") texts.insert(e.text);
  EXPECT_TRUE(texts.count("loss (thin: raw, thick: EMA 0.9; x: null; o, dashed: test loss)"));
  Write("plain.jsonl", MakeLog(20, false));
  ASSERT_EQ(Plot(Path("plain.jsonl") + " --out=" + Path("out/plain.svg")).code, 0);
  std::multiset<std::string> plain;
  for (const XmlElement& e : Svg("out/plain.svg"))
    if (e.name == "text") plain.insert(e.text);
  EXPECT_TRUE(plain.count("loss (thin: raw, thick: EMA 0.9; x: null)"));
  std::filesystem::remove(Path("out/eval.svg"));
  std::filesystem::remove(Path("out/plain.svg"));
  Write("bad.jsonl", MakeLog(2, false) + "{\"step\": 2, \"eval_loss\": 0.5, \"eval_top1\": \"high\"}\n");
  ExpectError(Path("bad.jsonl"), 1, Path("bad.jsonl") + ":3: \"eval_top1\" must be a number or null, not a string");
}

TEST_F(PlotCli, GarbageLineNamesFileAndLine) {
  Write("garbage.jsonl", MakeLog(3, false) + "step 4 loss 0.5\n" + MakeLog(2, false));
  ExpectError(Path("fp32.jsonl") + " " + Path("garbage.jsonl"), 1, Path("garbage.jsonl") + ":4: expected '{'");
  Write("half.jsonl", MakeLog(2, false) + "{\"step\": 3, \"loss\": 0.5, \"loss_scale\": 1, \"skipped\": false}\n");
  ExpectError(Path("half.jsonl"), 1, Path("half.jsonl") + ":3: no key \"lr\"");
  Write("text.jsonl", "{\"step\": 1, \"loss\": \"0.5\", \"loss_scale\": 1, \"skipped\": false, \"lr\": 1, \"ms\": 1}\n");
  ExpectError(Path("text.jsonl"), 1, Path("text.jsonl") + ":1: \"loss\" must be a number or null, not a string");
  Write("back.jsonl", MakeLog(3, false) + MakeLog(1, false));
  ExpectError(Path("back.jsonl"), 1, Path("back.jsonl") + ":4: step 1 follows step 3: steps must increase");
}

TEST_F(PlotCli, EmptyAndMissingLogsFail) {
  Write("empty.jsonl", "");
  ExpectError(Path("empty.jsonl"), 1, Path("empty.jsonl") + ": empty log");
  ExpectError(Path("fp32.jsonl") + " " + Path("missing.jsonl"), 1, "cannot open '" + Path("missing.jsonl") + "'");
  ExpectError(dir_.string(), 1, "is a directory");
}

TEST_F(PlotCli, BadFlagsExit2) {
  ExpectError(Path("fp32.jsonl") + " --smooth=1", 2, "--smooth=1: must be a finite number in [0, 1)");
  ExpectError(Path("fp32.jsonl") + " --width=10", 2, "--width=10");
  ExpectError(Path("fp32.jsonl") + " --color=red", 2, "unknown flag '--color'");
  ExpectError("", 2, "expects at least one LOG.jsonl");
  Result r = Plot(Path("fp32.jsonl") + " --out=" + Path("out/run.pdf"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("must be .svg or .png"), std::string::npos) << r.err;
  EXPECT_TRUE(OutputsLeft().empty());
}

TEST_F(PlotCli, FailureLeavesAnExistingOutputUntouched) {
  Write("out/run.png", "previous image");
  Write("garbage.jsonl", "not json\n");
  Result r = Plot(Path("garbage.jsonl") + " --out=" + Path("out/run.png"));
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(Read("out/run.png"), "previous image");
  EXPECT_EQ(OutputsLeft(), std::vector<std::string>{"run.png"});
}

TEST_F(PlotCli, HelpListsTheFlags) {
  Result r = Plot("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* flag : {"--out=", "--smooth=", "--width=", "--height="})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag << " missing from:\n" << r.out;
  EXPECT_NE(r.out.find("default: run.svg"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mixtrain
