// The graphs training runs, built in one place for one device: the prepared (canonicalized) model
// that evaluation and export start from, the training step and the evaluation graph. The Trainer
// runs them; `mixtrain check` (api/check.cc) builds and plans the very same ones, so a model it
// says trains is one whose step, evaluation and export `train` can build and plan.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "passes/pipeline.h"
#include "proto/mixtrain_pb.h"
#include "kernels/device.h"
#include "runtime/memory_report.h"

namespace mixtrain {

struct TrainingGraphs {
  TrainingRecipe recipe;
  std::unique_ptr<Graph> model;  // canonicalized: the export starts from it
  std::unique_ptr<Graph> step, eval;
  std::vector<std::string> params;  // what the step trains, in order
};

// Prepares `model` and builds the step and evaluation graphs from it with `recipe` (resolved
// for the backend they will run on: ResolveTrainingRecipe(config, model, backend.target())). `step_seed`
// is added to the dropout seed of the step (data parallel: each rank draws its own masks).
absl::StatusOr<TrainingGraphs> BuildTrainingGraphs(std::unique_ptr<Graph> model, const TrainingRecipe& recipe,
                                                   int64_t step_seed = 0);

// Plans what training will run as its sessions will on `device`, without running anything (the
// planner's DryPlan: batch 2 where the model leaves it open): the step with its state updates,
// evaluation, and the exported inference model (fp32, on the CPU, where `mixtrain run` runs it).
// The first failure, naming the graph ("training step: ...").
absl::Status DryPlanTraining(const TrainingGraphs& graphs, DeviceType device);

// Where training's memory will go, before anything runs: the step (with its state updates) and
// the evaluation planned on `device` with every symbolic dim of their inputs at `batch`.
absl::StatusOr<MemoryReport> PlanTrainingMemory(const TrainingGraphs& graphs, DeviceType device, int64_t batch);

}  // namespace mixtrain
