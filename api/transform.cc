// mixtrain::v1::TransformModel: the pass pipeline `mixtrain dump` shows, built from
// TransformOptions (passes/ registry plus the passes that take options), run on an imported model.
#include <algorithm>

#include "absl/strings/str_join.h"
#include "api/convert.h"
#include "graph/atomic_file.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "graph/shape_inference.h"
#include "graph/text_format.h"
#include "graph/verifier.h"
#include "kernels/backend.h"
#include "mixtrain/transform.h"
#include "passes/pass.h"
#include "passes/pass_registry.h"
#include "passes/canonicalize.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "passes/precision.h"
#include "passes/training.h"
#include "passes/inference.h"
#include "passes/unroll_loop.h"
#include "runtime/backend_choice.h"
#include "runtime/training_graphs.h"

namespace mixtrain {
inline namespace v1 {
namespace {

constexpr char kTrainStage[] = "train";
constexpr char kEvalStage[] = "eval";

// The TrainConfig `dump --passes=train|eval` builds from: options.train_config, else one made of
// the precision, loss and optimizer fields.
absl::StatusOr<pb::TrainConfig> TrainConfigOf(const TransformOptions& o) {
  if (o.train_config) {
    MT_RETURN_IF_ERROR(o.train_config->Validate());
    return api::ToProto(*o.train_config);
  }
  TrainConfig c;
  using P = TrainConfig::Precision;
  if (o.precision == "fp32") c.precision.preset = P::Preset::kFp32;
  else if (o.precision == "half") c.precision.preset = P::Preset::kHalf;
  else if (o.precision == "amp") c.precision.preset = P::Preset::kAmp;
  else return absl::InvalidArgumentError(absl::StrCat("unknown precision '", o.precision, "' (expected fp32, amp or half)"));
  if (o.low_type != ElementType::kFloat16 && o.low_type != ElementType::kBFloat16)
    return absl::InvalidArgumentError("TransformOptions::low_type must be fp16 or bf16");
  c.precision.low_dtype = o.low_type == ElementType::kFloat16 ? P::LowType::kFp16 : P::LowType::kBf16;
  c.precision.allow = o.allow;
  c.precision.deny = o.deny;
  if (o.fp32_nodes) c.precision.fp32_nodes.push_back(*o.fp32_nodes);
  c.loss = o.loss;
  c.class_axis = o.class_axis;
  using K = TrainConfig::Optimizer::Kind;
  if (o.optimizer == "adam") c.optimizer.kind = K::kAdam;
  else if (o.optimizer == "adamw") c.optimizer.kind = K::kAdamW;
  else if (o.optimizer == "sgd") c.optimizer.kind = K::kSgd;
  else if (o.optimizer == "adagrad") c.optimizer.kind = K::kAdagrad;
  else return absl::InvalidArgumentError(absl::StrCat("TransformOptions::optimizer '", o.optimizer, "' is unknown"));
  c.data_parallel = o.data_parallel;
  c.deterministic = o.deterministic;
  c.lora_rank = o.lora_rank;
  c.lora_alpha = o.lora_alpha;
  c.lora_targets = o.lora_targets;
  MT_RETURN_IF_ERROR(c.Validate());  // the op names of --allow/--deny, as `train` checks them
  return api::ToProto(c);
}

// Fails naming a pass that does not exist, before any model is read.
absl::Status CheckPassNames(const std::vector<std::string>& names) {
  for (const std::string& name : names)
    if (name != "train" && name != "eval") {
      if (!CreatePassByName(name).ok())
        return absl::InvalidArgumentError(absl::StrCat("passes: unknown pass '", name, "' (known: ",
                                                       absl::StrJoin(TransformPassNames(), ", "), ")"));
    }
  return absl::OkStatus();
}

// Single passes, named in options.passes, with their options from the recipe the trainer would
// use (passes/pipeline.h): the same policy, loss, trainable selection and optimizer. With
// "loss_scale" among them, autodiff differentiates the scaled loss and the optimizer unscales
// and moves the scale. Canonicalization runs first, as it does before training.
absl::Status BuildPasses(const TransformOptions& options, const TrainingRecipe& recipe, PassManager& pm) {
  std::vector<std::string> names = options.passes;
  if (!names.empty() && std::find(names.begin(), names.end(), "canonicalize") == names.end())
    names.insert(names.begin(), "canonicalize");
  const bool scaled = std::find(names.begin(), names.end(), "loss_scale") != names.end();
  for (const std::string& name : names) {
    absl::StatusOr<std::unique_ptr<Pass>> p;
    if (name == "canonicalize") {
      CanonicalizeOptions co;
      co.params = recipe.params;
      co.evaluator = recipe.target.evaluator;
      p = MakeCanonicalizePass(co);
    } else if (name == "unroll_loop") {
      p = MakeUnrollLoopPass(recipe.params, recipe.target.evaluator);
    } else if (name == "inference") {
      p = MakeInferencePass(recipe.target);
    } else if (name == "train_mode") {
      p = MakeTrainModePass(recipe.train_mode);
    } else if (name == "precision") {
      p = MakePrecisionPass(recipe.policy);
    } else if (name == "loss") {
      p = MakeLossPass(recipe.loss);
    } else if (name == "loss_scale") {
      p = MakeLossScalePass({recipe.init_scale});
    } else if (name == "autodiff") {
      AutodiffOptions ad;
      ad.trainable = recipe.params.trainable;
      ad.freeze = recipe.params.freeze;
      ad.evaluator = recipe.target.evaluator;
      if (scaled) {
        ad.loss = kScaledLossName;
        ad.freeze = ad.freeze.empty() ? std::string(kLossScaleName)  // the scale is state
                                      : absl::StrCat("(", ad.freeze, ")|", kLossScaleName);
      }
      p = MakeAutodiffPass(ad);
    } else if (name == "optimizer") {
      OptimizerOptions oo = recipe.optimizer;
      oo.unscale = oo.dynamic_scale = scaled;
      p = MakeOptimizerPass(oo);
    } else {
      p = CreatePassByName(name);
    }
    if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat("passes: ", p.status().message()));
    pm.Add(std::move(*p));
  }
  return absl::OkStatus();
}

// The backend the passes are built for: the device a Trainer with `config` would choose
// (runtime/backend_choice.h), except that an explicit "cuda" needs no GPU here: nothing runs.
absl::StatusOr<const Backend*> BackendToShow(const pb::TrainConfig& config, const Graph& model, TransformedModel& out) {
  absl::StatusOr<DeviceRequest> request = ParseDeviceFlag(config.device());
  if (!request.ok()) return absl::InvalidArgumentError(absl::StrCat("device: ", request.status().message()));
  const Backend* backend = &CudaBackend();
  if (*request != DeviceRequest::kCuda) {
    MT_ASSIGN_OR_RETURN(BackendChoice choice,
                        ChooseBackend(*request, "--device", "trains", [&](const Backend& b) -> absl::StatusOr<std::string> {
                          if (b.type() == DeviceType::kCPU) return std::string();
                          // As the Trainer checks it: the step and evaluation built for it.
                          MT_ASSIGN_OR_RETURN(TrainingRecipe recipe, ResolveTrainingRecipe(config, model, b.target()));
                          MT_ASSIGN_OR_RETURN(TrainingGraphs built, BuildTrainingGraphs(model.Clone(), recipe));
                          return MissingOn(b, {{built.step.get(), StateUpdates(*built.step)},
                                               {built.eval.get(), StateUpdates(*built.eval)}});
                        }));
    backend = choice.backend;
    out.device_note = choice.note;
  }
  out.device = backend->name();
  return backend;
}

}  // namespace

absl::StatusOr<TransformedModel> TransformModel(const std::string& model_path, const TransformOptions& options,
                                                GraphFormat format, const std::string& out_path) {
  return api::Guarded("TransformModel", [&]() -> absl::StatusOr<TransformedModel> {
    const std::vector<std::string>& names = options.passes;
    const bool stage = std::find(names.begin(), names.end(), kTrainStage) != names.end() ||
                       std::find(names.begin(), names.end(), kEvalStage) != names.end();
    if (stage && names.size() != 1)
      return absl::InvalidArgumentError("passes: 'train' and 'eval' are whole pipelines; give one of them alone");
    MT_RETURN_IF_ERROR(CheckPassNames(names));
    MT_ASSIGN_OR_RETURN(pb::TrainConfig config, TrainConfigOf(options));
    MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(model_path));
    TransformedModel out;
    if (!names.empty()) {
      // As the trainer would refuse them, before any pass: ops no kernel runs, of other domains.
      MT_RETURN_IF_ERROR(VerifyRunnableOps(*g, [](const Node& n) {
        return KernelRegistry::Global().Has(n.domain(), n.op_type(), DeviceType::kCPU) ||
               KernelRegistry::Global().Has(n.domain(), n.op_type(), DeviceType::kCUDA);
      }));
      MT_ASSIGN_OR_RETURN(const Backend* backend, BackendToShow(config, *g, out));
      MT_ASSIGN_OR_RETURN(TrainingRecipe recipe, ResolveTrainingRecipe(config, *g, backend->target()));
      if (stage) {  // the trainer's own pipeline (passes/pipeline.h)
        MT_RETURN_IF_ERROR(PrepareModel(*g, recipe));
        if (names[0] == kTrainStage) {
          MT_RETURN_IF_ERROR(BuildTrainingStep(*g, recipe).status());
        } else {
          MT_RETURN_IF_ERROR(BuildEvalGraph(*g, recipe));
        }
      } else {
        PassManager pm;
        MT_RETURN_IF_ERROR(BuildPasses(options, recipe, pm));
        MT_RETURN_IF_ERROR(pm.Run(*g));
      }
    }

    if (format == GraphFormat::kOnnx) {
      if (!out_path.empty()) {
        MT_RETURN_IF_ERROR(SaveOnnxFile(*g, out_path));
      } else {
        out.graph = SerializeDeterministic(ExportOnnx(*g));
      }
      return out;
    }
    MT_RETURN_IF_ERROR(InferShapes(*g));
    if (!options.node_risk.empty()) {
      absl::flat_hash_map<std::string, Node*> nodes;
      for (const auto& n : g->nodes()) nodes[n->name()] = n.get();
      for (const auto& [name, risk] : options.node_risk) {
        auto it = nodes.find(name);
        if (it == nodes.end()) {
          out.risk_nodes_missing.push_back(name);
        } else {
          it->second->annotations()["risk"] = risk;
        }
      }
      if (out.risk_nodes_missing.size() == options.node_risk.size())
        return absl::InvalidArgumentError(absl::StrCat(
            "none of the ", options.node_risk.size(), " nodes with a measured risk is in this graph (statistics of "
            "another model, or the graph is not the training step: dump with passes=train)"));
    }
    out.graph = format == GraphFormat::kDot ? GraphToDot(*g) : GraphToText(*g);
    if (stage || std::find(names.begin(), names.end(), "precision") != names.end()) {
      out.precision_report = PrecisionReportText(*g);
      if (format == GraphFormat::kText) out.graph += "\n" + out.precision_report;
    }
    if (!out_path.empty()) {
      MT_RETURN_IF_ERROR(WriteFileAtomically(out_path, out.graph));
      out.graph.clear();
    }
    return out;
  });
}

std::vector<std::string> TransformPassNames() {
  std::vector<std::string> names = RegisteredPassNames();
  names.push_back(kTrainStage);
  names.push_back(kEvalStage);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace v1
}  // namespace mixtrain
