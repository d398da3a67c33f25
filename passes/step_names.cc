// See step_names.h: the step's naming conventions, PhaseOf, and VerifyStepNames.
#include "passes/step_names.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/ops/precision_stats_row.h"

namespace mixtrain {

namespace {

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

}  // namespace

StepPhase PhaseOf(const Node& n) {
  const std::string& name = n.name();
  if (StartsWith(name, kPrecisionStatsNodePrefix)) return StepPhase::kDebug;
  if (StartsWith(name, kDataParallelNodePrefix)) return StepPhase::kCommunication;
  if (StartsWith(name, kRecomputeNodePrefix)) return StepPhase::kRecompute;
  if (name.find(kBackwardNodeMarker) != std::string::npos) return StepPhase::kBackward;
  if (StartsWith(name, kLossNodePrefix) || StartsWith(name, kLossScaleNodePrefix)) return StepPhase::kLoss;
  for (const char* p : kOptimizerNodePrefixes)
    if (StartsWith(name, p)) return StepPhase::kOptimizer;
  return StepPhase::kForward;
}

const char* StepPhaseName(StepPhase p) {
  switch (p) {
    case StepPhase::kForward: return "forward";
    case StepPhase::kLoss: return "loss";
    case StepPhase::kBackward: return "backward";
    case StepPhase::kOptimizer: return "optimizer";
    case StepPhase::kDebug: return "debug";
    case StepPhase::kCommunication: return "allreduce";
    case StepPhase::kRecompute: return "recompute";
  }
  return "?";
}

bool IsStateWriteBack(const Graph& g, const Node& n) {
  if (!StartsWith(n.name(), kStateNodePrefix) || n.num_outputs() == 0) return false;
  for (const Value* o : n.outputs())
    if (o == nullptr || !g.IsGraphOutput(o) || !StartsWith(o->name, kStatePrefix)) return false;
  return true;
}

namespace {

// Problems reported at most (the rest counted).
constexpr size_t kMaxProblems = 40;

bool IsIntegral(DType t) { return t == DType::kI32 || t == DType::kI64 || t == DType::kI8 || t == DType::kU8; }

bool IsScalar(const Value& v) {
  if (v.is_initializer()) return v.initializer->dims().empty();
  return v.shape.rank_known && v.shape.rank() == 0;
}

// The value's shape: its tensor's dims for an initializer.
Shape ShapeOf(const Value& v) { return v.is_initializer() ? Shape::Of(v.initializer->dims()) : v.shape; }

std::string ShapeText(const Value& v) { return ShapeOf(v).ToString(); }

// Equal where both are known: ranks when both are, dims when both are numbers.
bool ShapesAgree(const Shape& a, const Shape& b) {
  if (!a.rank_known || !b.rank_known) return true;
  if (a.rank() != b.rank()) return false;
  for (int64_t i = 0; i < a.rank(); ++i)
    if (a.dims[i].known() && b.dims[i].known() && a.dims[i].value != b.dims[i].value) return false;
  return true;
}

// The step's own scalars: never a parameter.
bool IsStepState(std::string_view name) {
  for (const char* n : {kLossScaleName, kGoodStepsName, kStepName, kSkippedStepsName})
    if (name == n) return true;
  for (const char* p : kOptimizerStatePrefixes)
    if (StartsWith(name, p)) return true;
  return StartsWith(name, kStatePrefix) || StartsWith(name, kGradPrefix);
}

// Where a node stands for the order check: its phase, with write-back nodes apart.
enum class Role { kForward, kLoss, kBackward, kOptimizer, kDebug, kCommunication, kRecompute, kWriteBack };

const char* RoleName(Role r) {
  switch (r) {
    case Role::kForward: return "forward";
    case Role::kLoss: return "loss";
    case Role::kBackward: return "backward";
    case Role::kOptimizer: return "optimizer";
    case Role::kDebug: return "debug";
    case Role::kCommunication: return "communication";
    case Role::kRecompute: return "recompute";
    case Role::kWriteBack: return "state write-back";
  }
  return "?";
}

// Forward (with the loss), backward, optimizer in step order; -1 for the others. Forward and loss
// nodes are one stage: the precision pass runs after the loss pass and names its Casts after the
// value they convert ("cast_<value>_<type>"), so a Cast between two loss nodes is a forward node
// by name (gpt_mini under AMP: loss/Flatten -> cast_loss/Flatten_out_f32 -> loss/...).
int Rank(Role r) {
  switch (r) {
    case Role::kForward: return 0;
    case Role::kLoss: return 0;
    case Role::kBackward: return 1;
    case Role::kOptimizer: return 2;
    default: return -1;
  }
}

class Checker {
 public:
  explicit Checker(const Graph& g) : g_(g) {
    for (const Value* v : g.inputs())
      if (!v->is_initializer()) inputs_.insert(v);
  }

  absl::Status Run() {
    Outputs();
    OptimizerState();
    StepScalars();
    Edges();
    if (problems_.empty()) return absl::OkStatus();
    std::string more = dropped_ > 0 ? absl::StrCat("; and ", dropped_, " more") : "";
    return absl::InternalError(absl::StrCat("the training step breaks its naming conventions (passes/step_names.h): ",
                                            absl::StrJoin(problems_, "; "), more));
  }

 private:
  template <typename... Args>
  void Problem(const Args&... args) {
    if (problems_.size() < kMaxProblems) {
      problems_.push_back(absl::StrCat(args...));
    } else {
      ++dropped_;
    }
  }

  bool IsInput(const Value* v) const { return inputs_.contains(v); }

  // grad/X and state/X outputs against X.
  void Outputs() {
    for (const Value* out : g_.outputs()) {
      const std::string& name = out->name;
      if (StartsWith(name, kGradPrefix)) {
        const std::string x = name.substr(std::string_view(kGradPrefix).size());
        const Value* p = g_.FindValue(x);
        if (p == nullptr || !(p->is_initializer() || IsInput(p))) {
          Problem("gradient output '", name, "' names no initializer or graph input '", x,
                  "' (rule: grad/X is the gradient of parameter X)");
          continue;
        }
        if (IsStepState(x))
          Problem("gradient output '", name, "' is of step state '", x,
                  "', not a parameter (rule: grad/X names a parameter)");
        if (!IsFloat(p->dtype) || !IsFloat(out->dtype))
          Problem("gradient output '", name, "' is ", DTypeName(out->dtype), " of ", DTypeName(p->dtype), " '", x,
                  "' (rule: a gradient and its parameter are float)");
        if (!ShapesAgree(out->shape, ShapeOf(*p)))
          Problem("gradient output '", name, "' has shape ", out->shape.ToString(), ", parameter '", x, "' ",
                  ShapeText(*p), " (rule: grad/X has X's shape)");
      } else if (StartsWith(name, kStatePrefix)) {
        std::string x = name.substr(std::string_view(kStatePrefix).size());
        const Value* init = g_.FindValue(x);
        bool duplicate = false;
        if (init == nullptr || !init->is_initializer()) {
          init = SharedStatistic(x);
          if (init == nullptr) {
            Problem("state output '", name, "' names no initializer '", x,
                    "' (rule: state/X is the next value of initializer X)");
            continue;
          }
          x = init->name;
          duplicate = true;
        }
        if (out->dtype != init->dtype)
          Problem("state output '", name, "' is ", DTypeName(out->dtype), ", initializer '", x, "' ",
                  DTypeName(init->dtype), " (rule: state/X has X's dtype)");
        if (!ShapesAgree(out->shape, ShapeOf(*init)))
          Problem("state output '", name, "' has shape ", out->shape.ToString(), ", initializer '", x, "' ",
                  ShapeText(*init), " (rule: state/X has X's shape)");
        if (!duplicate) written_.insert(x);
      }
    }
  }

  // "state/X_<k>" where X is an initializer written back as "state/X" too, computed by a forward
  // node: train_mode's second update of running statistics two BatchNorms share (the torch
  // exporter makes equal buffers one initializer read through Identity nodes, which canonicalize
  // removes: tests/data/zoo/resnet_pad.onnx, shufflenet_tv.onnx). StateUpdates pairs only
  // state/X, so such an update is computed and dropped: a known gap, not a broken name. X or null.
  const Value* SharedStatistic(const std::string& x) const {
    const size_t us = x.rfind('_');
    if (us == std::string::npos || us + 1 == x.size()) return nullptr;
    for (size_t i = us + 1; i < x.size(); ++i)
      if (x[i] < '0' || x[i] > '9') return nullptr;
    const Value* init = g_.FindValue(x.substr(0, us));
    const Value* first = g_.FindValue(absl::StrCat(kStatePrefix, x.substr(0, us)));
    const Value* dup = g_.FindValue(absl::StrCat(kStatePrefix, x));
    if (init == nullptr || !init->is_initializer() || first == nullptr || !g_.IsGraphOutput(first)) return nullptr;
    if (dup == nullptr || dup->producer == nullptr || PhaseOf(*dup->producer) != StepPhase::kForward) return nullptr;
    return init;
  }

  // <P>X: the per-parameter state of the optimizer.
  void OptimizerState() {
    for (const Value* v : g_.initializers()) {
      for (const char* prefix : kOptimizerStatePrefixes) {
        if (!StartsWith(v->name, prefix)) continue;
        const bool is_accum = std::string_view(prefix) == kAccumPrefix;
        const bool written = written_.contains(v->name);
        // Accumulation's constants ("accum/zero", "accum/inv_n") share the prefix, not the rule.
        if (is_accum && !written) break;
        if (!written) {
          Problem("optimizer state '", v->name, "' has no '", kStatePrefix, v->name,
                  "' output (rule: optimizer state is written back each step)");
        }
        const std::string x = v->name.substr(std::string_view(prefix).size());
        const Value* p = g_.FindValue(x);
        if (p == nullptr || !p->is_initializer()) {
          Problem("optimizer state '", v->name, "' names no parameter '", x, "' (rule: ", prefix,
                  "X is the state of parameter X)");
          break;
        }
        if (v->dtype != DType::kF32 || p->dtype != DType::kF32)
          Problem("optimizer state '", v->name, "' is ", DTypeName(v->dtype), ", parameter '", x, "' ",
                  DTypeName(p->dtype), " (rule: parameters and their optimizer state are f32)");
        if (v->initializer->dims() != p->initializer->dims())
          Problem("optimizer state '", v->name, "' has shape ", ShapeText(*v), ", parameter '", x, "' ",
                  ShapeText(*p), " (rule: ", prefix, "X has X's shape)");
        if (!written_.contains(x))
          Problem("parameter '", x, "' of optimizer state '", v->name, "' has no '", kStatePrefix, x,
                  "' output (rule: a parameter with optimizer state is updated)");
        break;
      }
    }
  }

  void StepScalars() {
    const Value* scale = g_.FindValue(kLossScaleName);
    if (scale != nullptr && !(scale->is_initializer() && scale->dtype == DType::kF32 && IsScalar(*scale)))
      Problem("'", kLossScaleName, "' is ", Describe(*scale), " (rule: the loss scale is an f32 scalar initializer)");
    for (const char* counter : {kStepName, kSkippedStepsName, kGoodStepsName}) {
      const Value* v = g_.FindValue(counter);
      if (v != nullptr && !(v->is_initializer() && IsIntegral(v->dtype) && IsScalar(*v)))
        Problem("'", counter, "' is ", Describe(*v), " (rule: a step counter is an integer scalar initializer)");
    }
    if (g_.FindValue(kGoodStepsName) != nullptr) {
      if (scale == nullptr)
        Problem("'", kGoodStepsName, "' without '", kLossScaleName,
                "' (rule: dynamic loss scaling counts the steps of a loss scale)");
      for (const char* n : {kGoodStepsName, kLossScaleName})
        if (!written_.contains(n))
          Problem("'", n, "' has no '", kStatePrefix, n, "' output (rule: dynamic loss scaling writes back '",
                  kLossScaleName, "' and '", kGoodStepsName, "')");
    }
    if (const Value* f = g_.FindValue(kFoundInfName);
        f != nullptr && !(g_.IsGraphOutput(f) && f->producer != nullptr && f->dtype == DType::kBool && IsScalar(*f)))
      Problem("'", kFoundInfName, "' is ", Describe(*f),
              " (rule: the overflow flag is a bool scalar output the step computes)");
    auto input = [&](const char* name, DType dtype, const char* rule) {
      const Value* v = g_.FindValue(name);
      if (v != nullptr && !(IsInput(v) && v->dtype == dtype && IsScalar(*v)))
        Problem("'", name, "' is ", Describe(*v), " (rule: ", rule, ")");
    };
    input(kLrName, DType::kF32, "the learning rate is an f32 scalar graph input");
    input(kApplyName, DType::kBool, "the accumulation flag is a bool scalar graph input");
    if (const Value* s = g_.FindValue(kScaledLossName); s != nullptr) {
      if (!(s->dtype == DType::kF32 && s->producer != nullptr && StartsWith(s->producer->name(), kLossScaleNodePrefix)))
        Problem("'", kScaledLossName, "' is ", Describe(*s), " (rule: the scaled loss is f32, computed by a ",
                kLossScaleNodePrefix, " node)");
      if (scale == nullptr)
        Problem("'", kScaledLossName, "' without '", kLossScaleName, "' (rule: the scaled loss is loss * loss_scale)");
    }
    // The loss pass computes it ("loss/..."), or --loss=output:loss names the model's own.
    if (const Value* l = g_.FindValue(kLossName);
        l != nullptr && !(l->producer != nullptr && g_.IsGraphOutput(l) && IsFloat(l->dtype)))
      Problem("'", kLossName, "' is ", Describe(*l), " (rule: the loss is a float graph output the step computes)");
    if (const Value* p = g_.FindValue(kPrecisionStatsName); p != nullptr) {
      const bool shaped = p->shape.rank_known && p->shape.rank() == 2 && p->shape.dims[1].known() &&
                          p->shape.dims[1].value == kNumStatFields;
      if (!(g_.IsGraphOutput(p) && p->dtype == DType::kF32 && shaped && p->producer != nullptr &&
            PhaseOf(*p->producer) == StepPhase::kDebug))
        Problem("'", kPrecisionStatsName, "' is ", Describe(*p), " (rule: the precision statistics are an f32 [K, ",
                kNumStatFields, "] output of a ", kPrecisionStatsNodePrefix, " node)");
    }
  }

  // "a f32 [] initializer", "a bool [] graph output of node 'amp/found_inf' (optimizer)".
  std::string Describe(const Value& v) const {
    std::string what = v.is_initializer()     ? "initializer"
                       : IsInput(&v)          ? "graph input"
                       : g_.IsGraphOutput(&v) ? "graph output"
                                              : "value";
    std::string s = absl::StrCat("a ", DTypeName(v.dtype), " ", ShapeText(v), " ", what);
    if (v.producer != nullptr)
      absl::StrAppend(&s, " of node '", v.producer->name(), "' (", StepPhaseName(PhaseOf(*v.producer)), ")");
    return s;
  }

  Role RoleOf(const Node& n) const {
    if (IsStateWriteBack(g_, n)) return Role::kWriteBack;
    switch (PhaseOf(n)) {
      case StepPhase::kForward: return Role::kForward;
      case StepPhase::kLoss: return Role::kLoss;
      case StepPhase::kBackward: return Role::kBackward;
      case StepPhase::kOptimizer: return Role::kOptimizer;
      case StepPhase::kDebug: return Role::kDebug;
      case StepPhase::kCommunication: return Role::kCommunication;
      case StepPhase::kRecompute: return Role::kRecompute;
    }
    return Role::kForward;
  }

  // Why a `from` node may not feed a `to` node, or null.
  static const char* Forbidden(Role from, Role to) {
    if (from == Role::kDebug && to != Role::kDebug) return "only the precision debugger reads its statistics";
    if (from == Role::kWriteBack && to != Role::kDebug)
      return "a state write-back is the step's result, read by no node";
    if (from == Role::kCommunication && !(to == Role::kOptimizer || to == Role::kCommunication ||
                                          to == Role::kDebug || to == Role::kWriteBack))
      return "all-reduced values feed the update only";
    if (from == Role::kRecompute && !(to == Role::kBackward || to == Role::kRecompute || to == Role::kDebug))
      return "recomputed values are read by the backward only";
    if (to == Role::kRecompute && !(from == Role::kForward || from == Role::kLoss || from == Role::kRecompute))
      return "a recomputed forward node reads the forward only";
    const int a = Rank(from), b = Rank(to);
    if (a >= 0 && b >= 0 && a > b) return "phases run forward and loss -> backward -> optimizer";
    return nullptr;
  }

  void Edges() {
    for (const auto& up : g_.nodes()) {
      const Node& to = *up;
      const Role to_role = RoleOf(to);
      for (const Value* in : to.inputs()) {
        if (in == nullptr || in->producer == nullptr) continue;
        const Node& from = *in->producer;
        const Role from_role = RoleOf(from);
        if (const char* why = Forbidden(from_role, to_role))
          Problem(RoleName(from_role), " node '", from.name(), "' feeds ", RoleName(to_role), " node '", to.name(),
                  "' through '", in->name, "' (rule: ", why, ")");
      }
    }
  }

  const Graph& g_;
  absl::flat_hash_set<const Value*> inputs_;  // graph inputs that are no initializers
  absl::flat_hash_set<std::string> written_;  // X of every state/X output
  std::vector<std::string> problems_;
  size_t dropped_ = 0;
};

}  // namespace

absl::Status VerifyStepNames(const Graph& step) { return Checker(step).Run(); }

}  // namespace mixtrain
