// See training_graphs.h.
#include "runtime/training_graphs.h"

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "passes/inference.h"
#include "passes/passes.h"
#include "runtime/planner.h"

namespace mixtrain {

absl::StatusOr<TrainingGraphs> BuildTrainingGraphs(std::unique_ptr<Graph> model, const TrainingRecipe& recipe,
                                                   int64_t step_seed) {
  TrainingGraphs out;
  out.recipe = recipe;
  MT_RETURN_IF_ERROR(PrepareModel(*model, recipe));
  out.step = model->Clone();
  TrainingRecipe step_recipe = recipe;
  step_recipe.train_mode.seed += step_seed;
  MT_ASSIGN_OR_RETURN(out.params, BuildTrainingStep(*out.step, step_recipe));
  out.eval = model->Clone();
  MT_RETURN_IF_ERROR(BuildEvalGraph(*out.eval, recipe));
  out.model = std::move(model);
  return out;
}

absl::Status DryPlanTraining(const TrainingGraphs& graphs, DeviceType device) {
  if (absl::Status st = DryPlan(*graphs.step, device, StateUpdates(*graphs.step)); !st.ok())
    return absl::Status(st.code(), absl::StrCat("training step: ", st.message()));
  if (absl::Status st = DryPlan(*graphs.eval, device, {}); !st.ok())
    return absl::Status(st.code(), absl::StrCat("evaluation: ", st.message()));
  std::unique_ptr<Graph> exported = graphs.model->Clone();
  if (absl::Status st = LowerForExport(*exported, DType::kF32); !st.ok())
    return absl::Status(st.code(), absl::StrCat("export: ", st.message()));
  // As an InferenceSession opens the exported file.
  if (absl::Status st = ImportForInference(*exported, CpuBackend().target()); !st.ok())
    return absl::Status(st.code(), absl::StrCat("export (inference on the cpu): ", st.message()));
  if (absl::Status st = DryPlan(*exported, DeviceType::kCPU, {}); !st.ok())
    return absl::Status(st.code(), absl::StrCat("export (inference on the cpu): ", st.message()));
  return absl::OkStatus();
}

absl::StatusOr<MemoryReport> PlanTrainingMemory(const TrainingGraphs& graphs, DeviceType device, int64_t batch) {
  const std::vector<std::pair<std::string, std::string>> updates = StateUpdates(*graphs.step);
  // What the Trainer reads back: the step's loss and overflow flag, the evaluation's loss and output.
  std::vector<std::string> step_fetches, eval_fetches;
  for (const char* name : {kFoundInfName, kLossName})
    if (graphs.step->FindValue(name) != nullptr) step_fetches.push_back(name);
  for (const std::string& name : {std::string(kLossName), graphs.recipe.loss.output})
    if (graphs.eval->FindValue(name) != nullptr) eval_fetches.push_back(name);
  PlanStats step, eval;
  if (absl::Status st = DryPlan(*graphs.step, device, updates, batch, &step, &step_fetches); !st.ok())
    return absl::Status(st.code(), absl::StrCat("training step: ", st.message()));
  if (absl::Status st = DryPlan(*graphs.eval, device, {}, batch, &eval, &eval_fetches); !st.ok())
    return absl::Status(st.code(), absl::StrCat("evaluation: ", st.message()));
  std::vector<std::string> state;
  for (const auto& [from, to] : updates) state.push_back(to);
  return PlannedMemory(*graphs.step, step, graphs.params, state, &eval);
}

}  // namespace mixtrain
