// See parameters.h for the rule.
#include "passes/parameters.h"

#include <optional>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "passes/training.h"

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

// Read by an RNN/GRU/LSTM node as its W, R or B (or was, before unroll_rnn).
bool IsRecurrentWeight(const Value* v) {
  if (v->metadata.contains(kRecurrentWeightMetadata)) return true;
  for (const Node* n : v->consumers)
    if (IsRecurrentOp(*n))
      for (size_t i = 1; i < 4 && i < n->num_inputs(); ++i)
        if (n->input(i) == v) return true;
  return false;
}

InitializerClass Classify(const Graph& g, const Value* v, const TorchExportInfo& torch) {
  using R = InitializerRole;
  if (!IsFloat(v->dtype)) return {R::kConstant, absl::StrCat(DTypeName(v->dtype), " tensor")};
  if (IsBatchNormStat(v)) return {R::kState, "BatchNorm running statistic"};
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
    return {R::kConstant, "made by the exporter (not a torch.export parameter)"};
  }
  if (g.producer_name == "tf2onnx") {
    if (absl::StrContains(v->name, "ReadVariableOp")) return {R::kParameter, "tf2onnx variable"};
    // tf2onnx folds a Keras LSTM/GRU/SimpleRNN's kernel, recurrent kernel and bias, re-ordered
    // into ONNX's gates, into the node's W, R and B (W0__30, R0__31, B0__32): no ReadVariableOp
    // reads them any more, but they are the layer's weights.
    if (IsRecurrentWeight(v)) return {R::kParameter, "tf2onnx recurrent layer weight (W, R or B)"};
    return {R::kConstant, "tf2onnx constant (not a ReadVariableOp)"};
  }
  // The TorchScript exporter's folded scalars; its larger onnx:: tensors may be folded weights
  // (a transposed Linear weight) and train.
  if (absl::StartsWith(v->name, "onnx::") && v->initializer->numel() == 1)
    return {R::kConstant, "exporter scalar (onnx:: name)"};
  if (auto it = v->metadata.find(kFoldedMetadata); it != v->metadata.end())
    return {R::kConstant, it->second == kPassConstant ? "a pass's constant" : "folded by canonicalization"};
  return {R::kParameter, "float initializer"};
}

}  // namespace

std::map<const Value*, InitializerClass> ClassifyInitializers(const Graph& g) {
  const TorchExportInfo torch = ReadTorchExportInfo(g);
  std::map<const Value*, InitializerClass> out;
  for (const Value* v : g.initializers()) out[v] = Classify(g, v, torch);
  return out;
}

absl::StatusOr<absl::flat_hash_set<const Value*>> SelectTrainable(const Graph& g,
                                                                  const TrainableSelection& sel) {
  std::optional<std::regex> keep, freeze;
  try {
    if (!sel.trainable.empty()) keep.emplace(sel.trainable, std::regex::ECMAScript);
    if (!sel.freeze.empty()) freeze.emplace(sel.freeze, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("bad --trainable/--freeze regex: ", e.what()));
  }
  absl::flat_hash_set<const Value*> out;
  for (const auto& [v, c] : ClassifyInitializers(g)) {
    bool train = keep ? IsFloat(v->dtype) && c.role != InitializerRole::kState &&
                            std::regex_match(v->name, *keep)
                      : c.role == InitializerRole::kParameter;
    if (train && freeze && std::regex_match(v->name, *freeze)) train = false;
    if (train) out.insert(v);
  }
  return out;
}

}  // namespace mixtrain
