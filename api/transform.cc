// mixtrain::v1::TransformModel: the pass pipeline `mixtrain dump` shows, built from
// TransformOptions (passes/ registry plus the passes that take options), run on an imported model.
#include <algorithm>

#include "api/convert.h"
#include "graph/atomic_file.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "graph/shape_inference.h"
#include "graph/text_format.h"
#include "mixtrain/transform.h"
#include "passes/pass.h"
#include "passes/pass_registry.h"
#include "passes/passes.h"
#include "passes/precision.h"
#include "passes/training.h"

namespace mixtrain {
inline namespace v1 {
namespace {

// The pipeline for options.passes; fails naming a bad pass or option before any model is read.
absl::Status BuildPipeline(const TransformOptions& options, PassManager& pm) {
  MT_ASSIGN_OR_RETURN(PrecisionPreset preset, ParsePrecisionPreset(options.precision));
  const DType low = api::ToDType(options.low_type);
  if (!IsLowFloat(low)) return absl::InvalidArgumentError("TransformOptions::low_type must be fp16 or bf16");
  PrecisionPolicy policy = PrecisionPolicy::Default(preset, low);
  for (const std::string& op : options.allow) policy.SetClass(op, PrecisionClass::kAllow);
  for (const std::string& op : options.deny) policy.SetClass(op, PrecisionClass::kDeny);
  if (options.fp32_nodes) MT_RETURN_IF_ERROR(policy.AddFp32NodeRegex(*options.fp32_nodes));
  // Canonicalization runs first whenever passes run, as it does before training.
  std::vector<std::string> names = options.passes;
  if (!names.empty() && std::find(names.begin(), names.end(), "canonicalize") == names.end())
    names.insert(names.begin(), "canonicalize");
  const bool scaled = std::find(names.begin(), names.end(), "loss_scale") != names.end();
  for (const std::string& name : names) {
    absl::StatusOr<std::unique_ptr<Pass>> p;
    if (name == "precision") {
      p = MakePrecisionPass(policy);
    } else if (name == "loss") {
      LossOptions lo;
      lo.kind = options.loss;
      lo.class_axis = options.class_axis;
      p = MakeLossPass(lo);
    } else if (name == "autodiff") {
      AutodiffOptions ad;
      if (scaled) {
        ad.loss = kScaledLossName;
        ad.freeze = kLossScaleName;  // the scale is state, not a parameter
      }
      p = MakeAutodiffPass(ad);
    } else if (name == "optimizer") {
      OptimizerOptions oo;
      MT_ASSIGN_OR_RETURN(oo.kind, ParseOptimizerKind(options.optimizer));
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

}  // namespace

absl::StatusOr<TransformedModel> TransformModel(const std::string& model_path, const TransformOptions& options,
                                                GraphFormat format, const std::string& out_path) {
  return api::Guarded("TransformModel", [&]() -> absl::StatusOr<TransformedModel> {
    PassManager pm;
    MT_RETURN_IF_ERROR(BuildPipeline(options, pm));
    MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(model_path));
    MT_RETURN_IF_ERROR(pm.Run(*g));

    TransformedModel out;
    if (format == GraphFormat::kOnnx) {
      if (!out_path.empty()) {
        MT_RETURN_IF_ERROR(SaveOnnxFile(*g, out_path));
      } else {
        out.graph = SerializeDeterministic(ExportOnnx(*g));
      }
      return out;
    }
    MT_RETURN_IF_ERROR(InferShapes(*g));
    out.graph = format == GraphFormat::kDot ? GraphToDot(*g) : GraphToText(*g);
    if (std::find(options.passes.begin(), options.passes.end(), "precision") != options.passes.end()) {
      out.precision_report = PrecisionReport(*g);
      if (format == GraphFormat::kText) out.graph += "\n" + out.precision_report;
    }
    if (!out_path.empty()) {
      MT_RETURN_IF_ERROR(WriteFileAtomically(out_path, out.graph));
      out.graph.clear();
    }
    return out;
  });
}

std::vector<std::string> TransformPassNames() { return RegisteredPassNames(); }

}  // namespace v1
}  // namespace mixtrain
