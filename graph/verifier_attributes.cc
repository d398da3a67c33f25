// The verifier's rules for what a schema cannot say: attribute values (finite floats, epsilons,
// counts, pads, axes within the rank), the attribute types of ops newer than the ONNX library,
// and the op names of the default domain. See verifier.h.
#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <span>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "graph/onnx_import.h"
#include "graph/verifier.h"
#include "onnx/defs/schema.h"

namespace mixtrain {
namespace {

std::string NodeRef(const Node& n) { return absl::StrCat("node '", n.name(), "' (", n.op_type(), ")"); }

bool DefaultDomain(const Node& n) { return n.domain().empty() || n.domain() == "ai.onnx"; }

// Ops of the default domain added in the opsets after the ONNX library's 17, up to
// kMaxOnnxOpset (21): 18 BitwiseAnd/Not/Or/Xor, CenterCropPad, Col2Im, GroupNormalization, Mish;
// 19 DeformConv; 20 AffineGrid, Gelu, ImageDecoder, RegexFullMatch, StringConcat, StringSplit.
constexpr const char* kOpsAfterLibrary[] = {
    "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "CenterCropPad", "Col2Im",
    "GroupNormalization", "Mish", "DeformConv", "AffineGrid", "Gelu", "ImageDecoder",
    "RegexFullMatch", "StringConcat", "StringSplit"};

// Attributes that ops changed in opsets 18..21 gained, with their types: the ONNX library's
// schema of such an op predates them (verifier.cc's ChangedAfterLibrary), so their types come
// from here; the attributes the library's schema knows keep its types.
struct NewAttribute {
  const char* op;
  const char* name;
  onnx::AttributeProto::AttributeType type;
};
constexpr NewAttribute kNewAttributes[] = {
    {"Split", "num_outputs", onnx::AttributeProto::INT},
    {"Resize", "antialias", onnx::AttributeProto::INT},
    {"Resize", "axes", onnx::AttributeProto::INTS},
    {"Resize", "keep_aspect_ratio_policy", onnx::AttributeProto::STRING},
    {"LpPool", "ceil_mode", onnx::AttributeProto::INT},
    {"LpPool", "dilations", onnx::AttributeProto::INTS},
    {"AveragePool", "dilations", onnx::AttributeProto::INTS},
    {"Cast", "saturate", onnx::AttributeProto::INT},
    {"CastLike", "saturate", onnx::AttributeProto::INT},
    {"QuantizeLinear", "block_size", onnx::AttributeProto::INT},
    {"QuantizeLinear", "output_dtype", onnx::AttributeProto::INT},
    {"QuantizeLinear", "saturate", onnx::AttributeProto::INT},
    {"DequantizeLinear", "block_size", onnx::AttributeProto::INT},
    {"GroupNormalization", "epsilon", onnx::AttributeProto::FLOAT},
    {"GroupNormalization", "num_groups", onnx::AttributeProto::INT},
    {"GroupNormalization", "stash_type", onnx::AttributeProto::INT},
    {"CenterCropPad", "axes", onnx::AttributeProto::INTS},
    {"Col2Im", "dilations", onnx::AttributeProto::INTS},
    {"Col2Im", "pads", onnx::AttributeProto::INTS},
    {"Col2Im", "strides", onnx::AttributeProto::INTS},
    {"Gelu", "approximate", onnx::AttributeProto::STRING},
    {"DeformConv", "dilations", onnx::AttributeProto::INTS},
    {"DeformConv", "group", onnx::AttributeProto::INT},
    {"DeformConv", "kernel_shape", onnx::AttributeProto::INTS},
    {"DeformConv", "offset_group", onnx::AttributeProto::INT},
    {"DeformConv", "pads", onnx::AttributeProto::INTS},
    {"DeformConv", "strides", onnx::AttributeProto::INTS},
    {"AffineGrid", "align_corners", onnx::AttributeProto::INT},
};

onnx::AttributeProto::AttributeType KindType(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::kFloat: return onnx::AttributeProto::FLOAT;
    case Attribute::Kind::kInt: return onnx::AttributeProto::INT;
    case Attribute::Kind::kString: return onnx::AttributeProto::STRING;
    case Attribute::Kind::kTensor: return onnx::AttributeProto::TENSOR;
    case Attribute::Kind::kFloats: return onnx::AttributeProto::FLOATS;
    case Attribute::Kind::kInts: return onnx::AttributeProto::INTS;
    case Attribute::Kind::kStrings: return onnx::AttributeProto::STRINGS;
    case Attribute::Kind::kOpaque: break;
  }
  return onnx::AttributeProto::UNDEFINED;  // kept serialized: graphs, sparse tensors, references
}

// Float attributes that hold data, not a setting: any value, NaN and infinities included, is
// meaningful (a Constant of -inf for an attention mask; Pad's fill value; Clip's open bounds).
bool HoldsData(const Node& n, const std::string& attr) {
  const std::string& op = n.op_type();
  return (op == "Constant" && (attr == "value_float" || attr == "value_floats")) ||
         (op == "Pad" && attr == "value") || (op == "Clip" && (attr == "min" || attr == "max"));
}

// Integer attributes that count something, so at least 1 (each element, for lists).
bool IsCount(const std::string& attr) {
  static const auto* names = new absl::flat_hash_set<std::string>{
      "num_outputs", "group", "num_groups", "blocksize", "strides", "dilations", "kernel_shape", "offset_group"};
  return names->contains(attr);
}

// Integer attributes that are sizes, so at least 0: a convolution's or pool's pads (Pad's own
// pads may be negative, which crops) and Split's split sizes.
bool IsSize(const Node& n, const std::string& attr) {
  return (attr == "pads" && n.op_type() != "Pad") || (attr == "split" && n.op_type() == "Split");
}

// Integer attributes that are flags (0 or 1) in every default-domain op that has them.
bool IsFlag(const std::string& attr) {
  static const auto* names = new absl::flat_hash_set<std::string>{
      "transA", "transB", "ceil_mode", "count_include_pad", "allowzero", "keepdims", "noop_with_empty_axes",
      "exclusive", "reverse", "select_last_index", "largest", "sorted", "align_corners", "antialias", "saturate",
      "onesided", "inverse", "input_forget", "linear_before_reset", "layout", "upper", "center_point_box",
      "detect_negative", "detect_positive", "fmod", "new_axis", "is_case_sensitive"};
  return names->contains(attr);
}

// String attributes that name one of a few choices (every opset's), one row per op and attribute;
// op "*" for every op with the attribute.
struct Choice {
  const char* op;
  const char* attr;
  const char* values;  // space-separated
};
constexpr Choice kChoices[] = {
    {"*", "auto_pad", "NOTSET SAME_UPPER SAME_LOWER VALID"},
    {"Resize", "mode", "nearest linear cubic"},
    {"Resize", "coordinate_transformation_mode",
     "half_pixel half_pixel_symmetric pytorch_half_pixel align_corners asymmetric tf_half_pixel_for_nn "
     "tf_crop_and_resize"},
    {"Resize", "nearest_mode", "round_prefer_floor round_prefer_ceil floor ceil"},
    {"Resize", "keep_aspect_ratio_policy", "stretch not_larger not_smaller"},
    {"Upsample", "mode", "nearest linear bilinear"},
    {"Gelu", "approximate", "none tanh"},
    {"Pad", "mode", "constant reflect edge wrap"},
    {"RNN", "direction", "forward reverse bidirectional"},
    {"GRU", "direction", "forward reverse bidirectional"},
    {"LSTM", "direction", "forward reverse bidirectional"},
    {"GridSample", "mode", "bilinear nearest bicubic linear cubic"},
    {"GridSample", "padding_mode", "zeros border reflection"},
    {"ScatterElements", "reduction", "none add mul max min"},
    {"ScatterND", "reduction", "none add mul max min"},
    {"SoftmaxCrossEntropyLoss", "reduction", "none sum mean"},
    {"NegativeLogLikelihoodLoss", "reduction", "none sum mean"},
    {"DepthToSpace", "mode", "DCR CRD"},
    {"RoiAlign", "mode", "avg max"},
};

// The choices of string attribute `attr` of `n`, or null when it takes any string.
const Choice* ChoiceOf(const Node& n, const std::string& attr) {
  for (const Choice& c : kChoices)
    if ((n.op_type() == c.op || std::string_view(c.op) == "*") && attr == c.attr) return &c;
  return nullptr;
}

absl::Status Refuse(const Node& n, const Attribute& a, const std::string& value, const char* rule) {
  return absl::InvalidArgumentError(
      absl::StrCat(NodeRef(n), " attribute '", a.name, "' is ", value, "; it must be ", rule));
}

// The range an axis attribute of `n` may take, given its first input's rank r: [-r, r-1], but
// Flatten's [-r, r], OneHot's [-r-1, r] (its output has one more axis) and Unsqueeze's axes of
// the output's rank r + |axes|.
std::pair<int64_t, int64_t> AxisRange(const Node& n, const Attribute& a, int64_t r) {
  if (n.op_type() == "Flatten") return {-r, r};
  if (n.op_type() == "OneHot") return {-r - 1, r};
  if (n.op_type() == "Unsqueeze") {
    const int64_t out = r + static_cast<int64_t>(a.ints.size());
    return {-out, out - 1};
  }
  return {-r, r - 1};
}

}  // namespace

absl::Status CheckAttributeValues(const Node& n) {
  if (!DefaultDomain(n)) return absl::OkStatus();  // other domains' attributes mean what they mean
  for (const Attribute& a : n.attributes()) {
    if (a.kind == Attribute::Kind::kFloat || a.kind == Attribute::Kind::kFloats) {
      if (HoldsData(n, a.name)) continue;
      const std::vector<float> values = a.kind == Attribute::Kind::kFloat ? std::vector<float>{a.f} : a.floats;
      for (float v : values) {
        if (!std::isfinite(v)) return Refuse(n, a, absl::StrCat(v), "a finite number");
        if (a.name == "epsilon" && v < 0) return Refuse(n, a, absl::StrCat(v), ">= 0");
      }
    }
    if (a.kind == Attribute::Kind::kInt || a.kind == Attribute::Kind::kInts) {
      const std::vector<int64_t> values = a.kind == Attribute::Kind::kInt ? std::vector<int64_t>{a.i} : a.ints;
      for (int64_t v : values) {
        if (IsCount(a.name) && v < 1) return Refuse(n, a, absl::StrCat(v), ">= 1");
        if (IsSize(n, a.name) && v < 0) return Refuse(n, a, absl::StrCat(v), ">= 0");
        if (IsFlag(a.name) && v != 0 && v != 1) return Refuse(n, a, absl::StrCat(v), "0 or 1");
      }
    }
    if (a.kind == Attribute::Kind::kString) {
      const Choice* c = ChoiceOf(n, a.name);
      if (c == nullptr) continue;
      const std::vector<absl::string_view> allowed = absl::StrSplit(c->values, ' ');
      if (std::find(allowed.begin(), allowed.end(), a.s) == allowed.end())
        return absl::InvalidArgumentError(absl::StrCat(NodeRef(n), " attribute '", a.name, "' is '",
                                                       absl::CEscape(a.s.substr(0, 64)), "'; it must be one of: ",
                                                       absl::StrJoin(allowed, ", ")));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckAxisAttributes(const Node& n) {
  if (!DefaultDomain(n) || n.num_inputs() == 0 || n.input(0) == nullptr) return absl::OkStatus();
  const Shape& s = n.input(0)->shape;
  // A scalar has no axis to name; ops on scalars that take an axis fail in their shape rule.
  if (!s.rank_known || s.rank() == 0) return absl::OkStatus();
  const int64_t r = static_cast<int64_t>(s.rank());
  for (const Attribute& a : n.attributes()) {
    const bool axis = a.name == "axis" && a.kind == Attribute::Kind::kInt;
    const bool axes = a.name == "axes" && a.kind == Attribute::Kind::kInts;
    if (!axis && !axes) continue;
    const auto [lo, hi] = AxisRange(n, a, r);
    for (int64_t v : axis ? std::vector<int64_t>{a.i} : a.ints)
      if (v < lo || v > hi)
        return absl::InvalidArgumentError(absl::StrCat(NodeRef(n), " attribute '", a.name, "' holds ", v,
                                                       ", outside [", lo, ", ", hi, "] for its rank-", r, " input '",
                                                       n.input(0)->name, "'"));
  }
  return absl::OkStatus();
}

absl::Status CheckNewerOpAttributes(const Node& n, const onnx::OpSchema* library_schema) {
  for (const Attribute& a : n.attributes()) {
    const onnx::AttributeProto::AttributeType t = KindType(a.kind);
    if (t == onnx::AttributeProto::UNDEFINED) continue;
    onnx::AttributeProto::AttributeType want = onnx::AttributeProto::UNDEFINED;
    for (const NewAttribute& row : kNewAttributes)
      if (n.op_type() == row.op && a.name == row.name) want = row.type;
    if (want == onnx::AttributeProto::UNDEFINED && library_schema != nullptr) {
      auto it = library_schema->attributes().find(a.name);
      if (it != library_schema->attributes().end()) want = it->second.type;
    }
    if (want != onnx::AttributeProto::UNDEFINED && want != t)
      return absl::InvalidArgumentError(absl::StrCat(
          NodeRef(n), " attribute '", a.name, "' is ", onnx::AttributeProto::AttributeType_Name(t), "; ",
          n.op_type(), " wants ", onnx::AttributeProto::AttributeType_Name(want)));
  }
  return absl::OkStatus();
}

const std::vector<std::string>& OnnxOpTypes() {
  static const auto* names = [] {
    absl::flat_hash_set<std::string> set(std::begin(kOpsAfterLibrary), std::end(kOpsAfterLibrary));
    for (const onnx::OpSchema& s : onnx::OpSchemaRegistry::get_all_schemas_with_history())
      if (s.domain() == onnx::ONNX_DOMAIN) set.insert(s.Name());
    auto* v = new std::vector<std::string>(set.begin(), set.end());
    std::sort(v->begin(), v->end());
    return v;
  }();
  return *names;
}

bool IsOnnxOpType(std::string_view op) {
  const std::vector<std::string>& names = OnnxOpTypes();
  return std::binary_search(names.begin(), names.end(), op);
}

std::string NearestName(std::string_view name, std::span<const std::string> candidates) {
  auto lower = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
  // Edit distance with adjacent transpositions (optimal string alignment), ignoring case: a
  // swapped pair of letters is the commonest typo ("Reul" is one edit from "Relu").
  auto distance = [&](std::string_view a, std::string_view b) {
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i)
      for (size_t j = 1; j <= b.size(); ++j) {
        const bool same = lower(a[i - 1]) == lower(b[j - 1]);
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + !same});
        if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]))
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    return d[a.size()][b.size()];
  };
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& c : candidates) {
    const size_t d = distance(name, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  return best;
}

absl::Status VerifyRunnableOps(const Graph& g, const std::function<bool(const Node&)>& runs) {
  std::vector<std::string> unknown;
  for (const auto& n : g.nodes()) {
    if (DefaultDomain(*n)) {
      if (!IsOnnxOpType(n->op_type()))
        unknown.push_back(absl::StrCat(NodeRef(*n), ": no ONNX op (the nearest is '",
                                       NearestName(n->op_type(), OnnxOpTypes()), "')"));
    } else if (!runs(*n)) {
      unknown.push_back(absl::StrCat("node '", n->name(), "' (", n->domain(), ".", n->op_type(),
                                     "): no op mixtrain runs"));
    }
  }
  if (unknown.empty()) return absl::OkStatus();
  constexpr size_t kShown = 5;
  const size_t count = unknown.size();
  const std::string more = count > kShown ? absl::StrCat("; and ", count - kShown, " more") : "";
  unknown.resize(std::min(count, kShown));
  return absl::UnimplementedError(absl::StrCat(
      count, " node", count == 1 ? "" : "s", " of ops mixtrain does not run (it runs ONNX's ops and its own "
      "ai.mixtrain ones): ", absl::StrJoin(unknown, "; "), more));
}

}  // namespace mixtrain
