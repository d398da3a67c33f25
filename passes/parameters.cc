// See parameters.h for the rule.
#include "passes/parameters.h"

#include <optional>
#include <regex>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "passes/parameter_positions.h"

namespace mixtrain {
namespace {

// What torch.export says about the model's inputs: target name -> kind (PARAMETER, BUFFER,
// CONSTANT_TENSOR...), from the graph signature the dynamo exporter stores in the graph's
// metadata ("p_fc_weight: PARAMETER target='fc.weight'") and from per-value metadata.
struct TorchExportInfo {
  bool present = false;
  std::map<std::string, std::string> kind_of;
};

TorchExportInfo ReadTorchExportInfo(const Graph& g) {
  TorchExportInfo info;
  if (auto it = g.graph_metadata.find(kTorchExportSignature); it != g.graph_metadata.end()) {
    info.present = true;
    static const std::regex line(R"(\S+: (\w+) target='([^']*)')");
    const std::string& sig = it->second;
    for (auto m = std::sregex_iterator(sig.begin(), sig.end(), line, std::regex_constants::match_default);
         m != std::sregex_iterator(); ++m)
      info.kind_of[(*m)[2]] = (*m)[1];
  }
  for (const Value* v : g.values())
    if (auto it = v->metadata.find(kTorchExportKind); it != v->metadata.end()) {
      info.present = true;
      info.kind_of[v->name] = it->second;
    }
  return info;
}

// Why an initializer of a torch.export model that its signature does not list is frozen: the
// exporter's own constant (a ones scale for a norm without affine weights, GELU coefficients).
// Frozen in any position, and no warning: the framework had nothing there to train.
constexpr char kExportersOwn[] = "made by the exporter (not a torch.export parameter)";

// The names in the onnxscript optimizer's "folded_from" list ("['fc.weight', 'val_3']").
std::vector<std::string> FoldedFrom(const Value* v) {
  std::vector<std::string> out;
  auto it = v->metadata.find(kOnnxscriptFoldedFrom);
  if (it == v->metadata.end()) return out;
  static const std::regex item(R"('([^']*)')");
  for (auto m = std::sregex_iterator(it->second.begin(), it->second.end(), item);
       m != std::sregex_iterator(); ++m)
    out.push_back((*m)[1]);
  return out;
}

bool IsBatchNormStat(const Value* v) {
  for (const Node* n : v->consumers)
    if (n->op_type() == "BatchNormalization" && n->domain().empty())
      for (size_t i = 3; i < 5 && i < n->num_inputs(); ++i)
        if (n->input(i) == v) return true;
  return false;
}

// The role-deciding reads of v: where it is read as a parameter (an RNN's W, R or B before
// unroll_rnn wrote the node out counts as one), and its first read in no parameter position.
struct Reads {
  std::string position, elsewhere;
  int positions = 0;
};

Reads RoleReads(const Value* v) {
  Reads r;
  if (auto it = v->metadata.find(kRecurrentWeightMetadata); it != v->metadata.end()) {
    r.position = absl::StrCat("recurrent ", it->second, " (written out by unroll_rnn)");
    ++r.positions;
  }
  for (const InitializerRead& read : ReadsOf(*v)) {
    if (read.position.empty()) {
      if (r.elsewhere.empty()) r.elsewhere = read.Describe();
    } else if (r.positions++ == 0) {
      r.position = read.Describe();
    }
  }
  if (r.positions > 1) absl::StrAppend(&r.position, " and ", r.positions - 1, " more");
  return r;
}

// Rules 4 to 6 of parameters.h.
InitializerClass Decide(const Graph& g, const Value* v, const TorchExportInfo& torch, const Reads& reads) {
  using R = InitializerRole;
  if (torch.present) {
    if (auto it = torch.kind_of.find(v->name); it != torch.kind_of.end()) {
      if (it->second == "PARAMETER") return {R::kParameter, "torch.export PARAMETER"};
      return {R::kConstant, absl::StrCat("torch.export ", it->second)};
    }
    // The onnxscript optimizer folds transposes/reshapes of parameters (and constant
    // subgraphs of buffers) into new initializers and says what from.
    // A function of a parameter trains (the framework trains it through the function:
    // pos.weight[arange(T)] folded with the buffer arange); one of buffers alone does not.
    std::string param, other;
    for (const std::string& src : FoldedFrom(v)) {
      auto it = torch.kind_of.find(src);
      if (it == torch.kind_of.end()) continue;
      if (it->second == "PARAMETER") param = src;
      else other = absl::StrCat(it->second, " ", src);
    }
    if (!param.empty()) return {R::kParameter, absl::StrCat("parameter ", param, " as folded by the exporter")};
    if (!other.empty()) return {R::kConstant, absl::StrCat("folded by the exporter from ", other)};
    return {R::kConstant, kExportersOwn};
  }
  if (reads.positions > 0) return {R::kParameter, absl::StrCat("read as ", reads.position)};
  // In no parameter position: the exporters' naming habits break the tie.
  if (g.producer_name == "tf2onnx") {
    if (absl::StrContains(v->name, "ReadVariableOp")) return {R::kParameter, "tf2onnx variable (ReadVariableOp)"};
    return {R::kConstant, "tf2onnx constant in no parameter position"};
  }
  // The TorchScript exporter's folded scalars (x * 0.5, exponents); its larger onnx:: tensors
  // may be folded weights and train.
  if (absl::StartsWith(v->name, "onnx::") && v->initializer->numel() == 1)
    return {R::kConstant, "exporter scalar (onnx:: name) in no parameter position"};
  return {R::kParameter, "float initializer"};
}

// `name` as an ECMAScript regex matching exactly it, for the flags a warning suggests.
std::string RegexQuote(const std::string& name) {
  std::string out;
  for (char ch : name) {
    if (std::string_view("\\^$.|?*+()[]{}").find(ch) != std::string_view::npos) out += '\\';
    out += ch;
  }
  return out;
}

InitializerClass Classify(const Graph& g, const Value* v, const TorchExportInfo& torch) {
  using R = InitializerRole;
  if (!IsFloat(v->dtype)) return {R::kConstant, absl::StrCat(DTypeName(v->dtype), " tensor")};
  if (IsBatchNormStat(v)) return {R::kState, "BatchNorm running statistic"};
  if (auto it = v->metadata.find(kFoldedMetadata); it != v->metadata.end())
    return {R::kConstant, it->second == kPassConstant ? "a pass's constant" : "folded by canonicalization"};
  if (v->metadata.contains(kLoraRole)) return {R::kParameter, kLoraAdapterReason};
  const Reads reads = RoleReads(v);
  InitializerClass c = Decide(g, v, torch, reads);
  c.position = reads.position;
  // torch.export's metadata is no guess; the position of a value also read elsewhere is.
  if (!torch.present && reads.positions > 0 && !reads.elsewhere.empty() && v->initializer->numel() == 1)
    c.ambiguity = absl::StrCat("'", v->name, "' is one value read as ", reads.position, " and as ", reads.elsewhere,
                               ": it trains; --freeze='", RegexQuote(v->name), "' keeps it constant");
  return c;
}

}  // namespace

std::map<const Value*, InitializerClass> ClassifyInitializers(const Graph& g) {
  const TorchExportInfo torch = ReadTorchExportInfo(g);
  std::map<const Value*, InitializerClass> out;
  for (const Value* v : g.initializers()) out[v] = Classify(g, v, torch);
  return out;
}

namespace {

// --trainable and --freeze, compiled.
struct Flags {
  std::optional<std::regex> keep, freeze;
  bool lora = false;  // the graph has LoRA adapters: they train, the rest only where --trainable says

  bool Trains(const Value* v, const InitializerClass& c) const {
    const bool adapter = c.reason == kLoraAdapterReason;
    bool train = adapter ? true
                 : keep  ? IsFloat(v->dtype) && c.role != InitializerRole::kState && std::regex_match(v->name, *keep)
                         : c.role == InitializerRole::kParameter && !lora;
    return train && !(freeze && std::regex_match(v->name, *freeze));
  }
};

bool HasLoraAdapters(const std::map<const Value*, InitializerClass>& classes) {
  for (const auto& [v, c] : classes)
    if (c.reason == kLoraAdapterReason) return true;
  return false;
}

absl::StatusOr<Flags> Compile(const TrainableSelection& sel) {
  Flags f;
  try {
    if (!sel.trainable.empty()) f.keep.emplace(sel.trainable, std::regex::ECMAScript);
    if (!sel.freeze.empty()) f.freeze.emplace(sel.freeze, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("bad --trainable/--freeze regex: ", e.what()));
  }
  return f;
}

}  // namespace

absl::StatusOr<absl::flat_hash_set<const Value*>> SelectTrainable(const Graph& g,
                                                                  const TrainableSelection& sel) {
  MT_ASSIGN_OR_RETURN(Flags flags, Compile(sel));
  const auto classes = ClassifyInitializers(g);
  flags.lora = HasLoraAdapters(classes);
  absl::flat_hash_set<const Value*> out;
  for (const auto& [v, c] : classes)
    if (flags.Trains(v, c)) out.insert(v);
  return out;
}

absl::StatusOr<std::vector<std::string>> TrainabilityWarnings(const Graph& g, const TrainableSelection& sel) {
  MT_ASSIGN_OR_RETURN(Flags flags, Compile(sel));
  const auto classes = ClassifyInitializers(g);
  flags.lora = HasLoraAdapters(classes);
  std::vector<std::string> out;
  for (const Value* v : g.initializers()) {
    const InitializerClass& c = classes.at(v);
    const bool trains = flags.Trains(v, c);
    if (trains && !c.ambiguity.empty()) out.push_back(c.ambiguity);
    // Under LoRA the model's own weights are frozen by design.
    if (trains || c.position.empty() || c.reason == kExportersOwn || flags.lora) continue;
    const std::string why = c.role != InitializerRole::kParameter ? c.reason
                            : flags.keep                         ? "--trainable does not match it"
                                                                 : "--freeze matches it";
    out.push_back(absl::StrCat("'", v->name, "' is read as ", c.position, " but does not train: ", why));
  }
  return out;
}

}  // namespace mixtrain
