// mixtrain::v1::CheckModel: the training pipeline's front half (canonicalize, train_mode, loss,
// autodiff) run to collect every blocker, plus a CPU-kernel lookup for every node it leaves; then,
// when nothing blocks, the training step, evaluation graph and export `train` builds, each planned
// as its session will be (runtime/training_graphs.h); with device "cuda", the ops of the whole
// training step that have no CUDA kernel.
#include <set>

#include "absl/strings/str_cat.h"
#include "api/convert.h"
#include "graph/onnx_import.h"
#include "graph/shape_inference.h"
#include "kernels/backend.h"
#include "kernels/host_evaluator.h"
#include "mixtrain/check.h"
#include "passes/canonicalize.h"
#include "passes/lora.h"
#include "passes/parameters.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "passes/unroll_loop.h"
#include "passes/training.h"
#include "proto/mixtrain_pb.h"
#include "runtime/planner.h"
#include "runtime/training_graphs.h"

namespace mixtrain {
inline namespace v1 {
namespace {

const char* RoleName(InitializerRole r) {
  switch (r) {
    case InitializerRole::kParameter: return "parameter";
    case InitializerRole::kState: return "state";
    case InitializerRole::kConstant: return "constant";
  }
  return "?";
}

bool HasSymbol(const Shape& s) {
  if (!s.rank_known) return true;
  for (const Dim& d : s.dims)
    if (!d.known()) return true;
  return false;
}

// Nodes no CPU kernel runs for their dtypes.
void MissingKernels(const Graph& g, std::vector<std::string>* out) {
  std::set<std::string> seen;
  for (const auto& n : g.nodes()) {
    // No kernel runs a loop: the pipeline writes it out (unroll_loop), or says why it cannot.
    if (IsLoopOp(*n)) {
      const std::string why = WhyLoopNotUnrolled(g, *n, &EvaluateOnHost);
      if (!why.empty()) out->push_back(absl::StrCat("node '", n->name(), "' (", n->op_type(), ") is not unrolled: ", why));
      continue;
    }
    std::vector<DType> ins, outs;
    for (const Value* v : n->inputs()) ins.push_back(v ? v->dtype : DType::kUndefined);
    for (const Value* v : n->outputs()) outs.push_back(v ? v->dtype : DType::kUndefined);
    auto k = KernelRegistry::Global().Find(*n, DeviceType::kCPU, ins, outs);
    if (!k.ok() && seen.insert(n->name()).second) out->push_back(std::string(k.status().message()));
  }
}

// The config `train` runs with these options and its defaults otherwise.
pb::TrainConfig TrainConfigOf(const CheckOptions& options) {
  if (options.train_config) return api::ToProto(*options.train_config);
  pb::TrainConfig c;
  c.set_loss(options.loss);
  c.set_output(options.output);
  c.set_class_axis(options.class_axis);
  c.set_freeze(options.freeze);
  c.set_trainable(options.trainable);
  c.set_lora_rank(options.lora_rank);
  if (options.lora_alpha) c.set_lora_alpha(*options.lora_alpha);
  if (!options.lora_targets.empty()) c.set_lora_targets(options.lora_targets);
  return c;
}

// The ops of the training step (with Adam) and of its evaluation without a CUDA kernel: first by
// op (bf16 AMP, as dtype auto picks on a GPU), then, when every op has some kernel, exactly: both
// graphs planned for CUDA as a session would (batch 2 where the model leaves it open) in fp32, bf16
// AMP and fp16 AMP with dynamic loss scaling, so a kernel without the dtype a step uses is named too.
absl::Status CheckCudaKernels(const Graph& model, const CheckOptions& options, ModelCheck* out) {
  if (absl::Status st = CudaBackend().LoadKernels(); !st.ok()) {
    out->cuda_unknown = std::string(st.message());
    return absl::OkStatus();
  }
  struct Variant {
    const char* name;
    pb::PrecisionPolicy::Preset preset;
    pb::PrecisionPolicy::LowType low;
  };
  const Variant variants[] = {{"bf16 AMP", pb::PrecisionPolicy::AMP, pb::PrecisionPolicy::BF16},
                              {"fp32", pb::PrecisionPolicy::FP32, pb::PrecisionPolicy::BF16},
                              {"fp16 AMP", pb::PrecisionPolicy::AMP, pb::PrecisionPolicy::FP16}};
  std::set<std::string> missing;
  for (const Variant& v : variants) {
    pb::TrainConfig c = TrainConfigOf(options);
    c.mutable_precision()->set_preset(v.preset);
    c.mutable_precision()->set_low_dtype(v.low);
    std::unique_ptr<Graph> step = model.Clone();
    MT_ASSIGN_OR_RETURN(TrainingRecipe recipe, ResolveTrainingRecipe(c, *step, CudaBackend().target()));
    MT_RETURN_IF_ERROR(PrepareModel(*step, recipe));
    std::unique_ptr<Graph> eval = step->Clone();
    MT_RETURN_IF_ERROR(BuildTrainingStep(*step, recipe).status());
    MT_RETURN_IF_ERROR(BuildEvalGraph(*eval, recipe));
    if (&v == &variants[0]) {
      for (const Graph* g : {step.get(), eval.get()})
        for (std::string& op : OpsWithoutKernels(*g, DeviceType::kCUDA)) missing.insert(std::move(op));
      if (!missing.empty()) break;
    }
    for (const Graph* g : {step.get(), eval.get()}) {
      absl::Status st = DryPlan(*g, DeviceType::kCUDA, StateUpdates(*g));
      if (absl::IsUnimplemented(st)) missing.insert(absl::StrCat(v.name, g == eval.get() ? " eval" : " step", ": ", st.message()));
    }
  }
  out->cuda_missing_ops.assign(missing.begin(), missing.end());
  return absl::OkStatus();
}

// Builds the CPU's training step, evaluation graph and export as the Trainer does and plans each
// (runtime/training_graphs.h).
absl::Status BuildAndPlanForTraining(const Graph& model, const CheckOptions& options) {
  const pb::TrainConfig c = TrainConfigOf(options);
  MT_ASSIGN_OR_RETURN(TrainingRecipe recipe, ResolveTrainingRecipe(c, model, CpuBackend().target()));
  MT_ASSIGN_OR_RETURN(TrainingGraphs graphs, BuildTrainingGraphs(model.Clone(), recipe));
  return DryPlanTraining(graphs, DeviceType::kCPU);
}

// `check --memory`: the step and evaluation built with the report's precision and recompute
// (Adam), planned at options.memory_batch.
absl::StatusOr<MemoryStatistics> PlanMemoryForTraining(const Graph& model, const CheckOptions& options) {
  if (options.train_config) {  // the run's own config, its optimizer included
    const pb::TrainConfig c = TrainConfigOf(options);
    MT_ASSIGN_OR_RETURN(TrainingRecipe recipe, ResolveTrainingRecipe(c, model, CpuBackend().target()));
    MT_ASSIGN_OR_RETURN(TrainingGraphs graphs, BuildTrainingGraphs(model.Clone(), recipe));
    MT_ASSIGN_OR_RETURN(MemoryReport r, PlanTrainingMemory(graphs, DeviceType::kCPU, options.memory_batch));
    MeasureProcessMemory(r);
    return api::ToMemoryStatistics(r);
  }
  TrainConfig tc;
  tc.precision = options.precision;
  tc.recompute = options.recompute;
  const pb::TrainConfig c = api::ToProto(tc);
  pb::TrainConfig base = TrainConfigOf(options);
  *base.mutable_precision() = c.precision();
  base.set_recompute(c.recompute());
  base.mutable_optimizer()->set_kind(pb::OptimizerConfig::ADAM);
  MT_ASSIGN_OR_RETURN(TrainingRecipe recipe, ResolveTrainingRecipe(base, model, CpuBackend().target()));
  MT_ASSIGN_OR_RETURN(TrainingGraphs graphs, BuildTrainingGraphs(model.Clone(), recipe));
  MT_ASSIGN_OR_RETURN(MemoryReport r, PlanTrainingMemory(graphs, DeviceType::kCPU, options.memory_batch));
  MeasureProcessMemory(r);
  return api::ToMemoryStatistics(r);
}

}  // namespace

// `o` with the fields its train_config sets taken from it.
static absl::StatusOr<CheckOptions> Effective(const CheckOptions& o) {
  if (!o.train_config) return o;
  MT_RETURN_IF_ERROR(o.train_config->Validate());
  CheckOptions e = o;
  const TrainConfig& c = *o.train_config;
  e.loss = c.loss;
  e.output = c.output;
  e.class_axis = c.class_axis;
  e.freeze = c.freeze;
  e.trainable = c.trainable;
  e.precision = c.precision;
  e.recompute = c.recompute;
  e.lora_rank = c.lora_rank;
  e.lora_alpha = c.lora_alpha;
  e.lora_targets = c.lora_targets;
  return e;
}

absl::StatusOr<ModelCheck> CheckModel(const std::string& model_path, const CheckOptions& given) {
  return api::Guarded("CheckModel", [&]() -> absl::StatusOr<ModelCheck> {
    MT_ASSIGN_OR_RETURN(const CheckOptions options, Effective(given));
    MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(model_path));
    const std::unique_ptr<Graph> imported = g->Clone();
    ModelCheck out;
    // A value named like the training step's own ("lr", "step", ...) blocks training, as train says.
    if (absl::Status st = CheckReservedNames(*g, ""); !st.ok()) out.blockers.push_back(std::string(st.message()));
    out.nodes_imported = static_cast<int>(g->num_nodes());
    for (const Value* v : g->inputs())
      if (!v->is_initializer() && HasSymbol(v->shape))
        out.dynamic_dims.push_back(absl::StrCat("input '", v->name, "': ", v->shape.ToString()));
    for (const Value* v : g->outputs())
      if (HasSymbol(v->shape))
        out.dynamic_dims.push_back(absl::StrCat("output '", v->name, "': ", v->shape.ToString()));

    // Asked of the model as exported: canonicalization folds a frozen weight's views into new
    // initializers, which no longer carry the name the user froze.
    MT_ASSIGN_OR_RETURN(out.trainability_warnings, TrainabilityWarnings(*g, {options.trainable, options.freeze}));

    CanonicalizeReport report;
    CanonicalizeOptions co;
    co.params = {options.trainable, options.freeze};
    co.report = &report;
    co.evaluator = &EvaluateOnHost;
    {
      PassManager pm;
      pm.Add(MakeCanonicalizePass(co));
      absl::Status st = pm.Run(*g);
      if (!st.ok()) {  // shapes that contradict each other, say: nothing after this can run
        out.blockers.push_back(std::string(st.message()));
        return out;
      }
    }
    out.nodes_after = static_cast<int>(g->num_nodes());
    out.shape_values_folded = report.shape_values;
    out.nodes_folded = report.folded_nodes;
    out.nodes_simplified = report.simplified;
    out.nodes_removed = report.removed_nodes;
    out.initializers_removed = report.removed_initializers;
    out.not_folded = report.not_folded;
    std::set<std::string> ops;
    for (const auto& n : g->nodes()) {
      ops.insert(n->domain().empty() ? n->op_type() : n->domain() + "." + n->op_type());
      if (n->op_type() == "Dropout" && n->domain().empty()) {
        const Value* ratio = n->input(1);
        out.dropouts.push_back(ratio != nullptr && ratio->is_initializer()
                                   ? absl::StrCat(n->name(), " (ratio ", ratio->initializer->GetDouble(0), ")")
                                   : n->name());
      }
    }
    out.op_types.assign(ops.begin(), ops.end());
    // LoRA: the adapters join the model here, so what trains below is what `train` trains.
    if (options.lora_rank > 0 || !options.lora_targets.empty() || options.lora_alpha) {
      MT_ASSIGN_OR_RETURN(TrainingRecipe recipe, ResolveTrainingRecipe(TrainConfigOf(options), *g, CpuBackend().target()));
      const auto before = ClassifyInitializers(*g);
      for (const Value* v : g->initializers())
        if (before.at(v).role == InitializerRole::kParameter) out.model_parameters += v->initializer->numel();
      MT_ASSIGN_OR_RETURN(std::vector<LoraTarget> targets, FindLoraTargets(*g, recipe.lora));
      PassManager pm;
      pm.Add(MakeLoraPass(recipe.lora));
      MT_RETURN_IF_ERROR(pm.Run(*g));
      for (const LoraTarget& t : targets) {
        const int64_t n = (LoraFanIn(t) + t.out) * recipe.lora.rank;
        out.adapters.push_back({t.weight, t.in, t.out, recipe.lora.rank, n * 4, LoraADims(t, recipe.lora.rank),
                                LoraBDims(t, recipe.lora.rank)});
        out.adapter_parameters += n;
      }
    }

    MT_ASSIGN_OR_RETURN(absl::flat_hash_set<const Value*> selected,
                        SelectTrainable(*g, {options.trainable, options.freeze}));
    const auto classes = ClassifyInitializers(*g);
    std::map<std::string, size_t> index;
    for (const Value* v : g->initializers()) {
      const InitializerClass& c = classes.at(v);
      InitializerReport r;
      r.name = v->name;
      r.dtype = DTypeName(v->dtype);
      r.dims = v->initializer->dims();
      r.bytes = v->initializer->numel() * static_cast<int64_t>(DTypeSize(v->dtype));
      r.role = RoleName(c.role);
      r.reason = c.reason;
      r.position = c.position;
      r.selected = selected.contains(v);
      if (selected.contains(v) && c.role == InitializerRole::kConstant) r.reason += " (selected by --trainable)";
      if (!selected.contains(v) && c.role == InitializerRole::kParameter)
        r.reason += !out.adapters.empty() && options.trainable.empty() ? " (frozen: LoRA trains the adapters)"
                    : options.trainable.empty()                        ? " (--freeze matches it)"
                                                                       : " (--trainable does not match it)";
      index[v->name] = out.initializers.size();
      out.initializers.push_back(std::move(r));
    }

    // The forward's kernels, then the backward graph with every blocker collected.
    MissingKernels(*g, &out.blockers);
    std::vector<std::string> problems;
    GradientGraphOptions go;
    go.loss.kind = options.loss;
    go.loss.output = options.output;
    go.loss.class_axis = options.class_axis;
    go.autodiff.trainable = options.trainable;
    go.autodiff.freeze = options.freeze;
    go.autodiff.problems = &problems;
    go.autodiff.evaluator = &EvaluateOnHost;
    absl::StatusOr<std::unique_ptr<Graph>> grad = BuildGradientGraph(*g, go);
    if (grad.ok()) {
      for (const std::string& name : GradientOutputs(**grad)) {
        auto it = index.find(name.substr(std::string(kGradPrefix).size()));
        if (it != index.end()) out.initializers[it->second].trains = true;
      }
      std::vector<std::string> missing;
      MissingKernels(**grad, &missing);
      for (std::string& m : missing)
        if (std::find(out.blockers.begin(), out.blockers.end(), m) == out.blockers.end())
          out.blockers.push_back(std::move(m));
    } else if (!problems.empty()) {
      out.blockers.insert(out.blockers.end(), problems.begin(), problems.end());
    } else {
      out.blockers.push_back(std::string(grad.status().message()));
    }
    // What `train` will build and plan on the CPU with these options (and its defaults otherwise):
    // the step, evaluation and export, so a model said to train is one `train` starts.
    if (out.blockers.empty()) {
      absl::Status st = BuildAndPlanForTraining(*imported, options);
      if (!st.ok()) out.blockers.push_back(std::string(st.message()));
    }
    out.trains = out.blockers.empty();
    if (options.device == "cuda" && out.trains) MT_RETURN_IF_ERROR(CheckCudaKernels(*g, options, &out));
    if (options.memory_batch > 0 && out.trains) {
      MT_ASSIGN_OR_RETURN(out.memory, PlanMemoryForTraining(*imported, options));
    }
    return out;
  });
}

}  // namespace v1
}  // namespace mixtrain
