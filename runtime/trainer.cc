#include "runtime/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/check.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "graph/shape_inference.h"
#include "graph/sym_dim.h"
#include "passes/lora.h"
#include "passes/pipeline.h"
#include "passes/passes.h"
#include "passes/precision.h"
#include "passes/training.h"
#include "runtime/backend_choice.h"
#include "runtime/planner.h"
#include "runtime/trainer_checkpoint.h"
#include "runtime/training_graphs.h"

namespace mixtrain {
namespace {

constexpr double kPi = 3.14159265358979323846;

}  // namespace

std::vector<StepNodeTime> Trainer::Profile() const {
  std::vector<StepNodeTime> out;
  for (const NodeProfile& p : train_->ProfileByNode())
    out.push_back({p.node, PhaseOf(*p.node), p.calls, p.seconds, p.allocations, p.flops, p.bytes});
  return out;
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const std::string& model_path,
                                                         const pb::TrainConfig& config,
                                                         std::shared_ptr<Communicator> communicator) {
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(model_path));
  return CreateFromOwnGraph(std::move(g), config, std::move(communicator), nullptr, /*model_is_ours=*/true);
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::CreateFromBytes(const std::string& bytes,
                                                                  const pb::TrainConfig& config,
                                                                  std::shared_ptr<Communicator> communicator) {
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxBytes(bytes, "."));
  return CreateFromOwnGraph(std::move(g), config, std::move(communicator), nullptr, /*model_is_ours=*/true);
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::CreateFromGraph(std::unique_ptr<Graph> model,
                                                                  const pb::TrainConfig& config,
                                                                  std::shared_ptr<Communicator> communicator,
                                                                  std::shared_ptr<Device> device) {
  return CreateFromOwnGraph(std::move(model), config, std::move(communicator), std::move(device),
                            /*model_is_ours=*/false);
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::CreateFromOwnGraph(std::unique_ptr<Graph> model,
                                                                     const pb::TrainConfig& config,
                                                                     std::shared_ptr<Communicator> communicator,
                                                                     std::shared_ptr<Device> device,
                                                                     bool model_is_ours) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->model_is_ours_ = model_is_ours;
  t->device_ = std::move(device);
  t->config_ = config;
  t->total_steps_ = config.steps();
  if (config.data_parallel()) {
    if (communicator == nullptr) {
      MT_ASSIGN_OR_RETURN(communicator, Communicator::MpiWorld());
    }
    t->comm_ = std::move(communicator);
  } else if (communicator != nullptr) {
    return absl::InvalidArgumentError("a communicator was given but data_parallel is off");
  }
  MT_RETURN_IF_ERROR(t->Build(std::move(model)));
  return t;
}

absl::Status Trainer::CheckRanksAgree() const {
  // Each rank's model signature and config hashes, gathered everywhere; on a mismatch every rank
  // compares its config with rank 0's field by field, so each reports the same thing.
  pb::TrainConfig mine = config_;
  for (const char* f : {"model", "data", "steps", "epochs", "device", "debug_precision"})
    mine.GetReflection()->ClearField(&mine, mine.GetDescriptor()->FindFieldByName(f));
  std::string bytes;
  mine.SerializeToString(&bytes);
  const int k = comm_->size();
  const uint64_t hashes[2] = {signature_.hash(), Fnv1a(0xcbf29ce484222325ull, bytes)};
  std::vector<uint64_t> all(2 * static_cast<size_t>(k));
  MT_RETURN_IF_ERROR(comm_->AllGather(hashes, sizeof hashes, all.data()));
  std::vector<std::string> why;
  for (int r = 1; r < k; ++r) {
    if (all[2 * r] != all[0]) why.push_back(absl::StrCat("rank ", r, "'s model differs from rank 0's"));
    if (all[2 * r + 1] != all[1]) why.push_back(absl::StrCat("rank ", r, "'s config differs from rank 0's"));
  }
  if (why.empty()) return absl::OkStatus();
  // Name the fields: every config (padded to the longest) to everyone, and the first one that
  // differs compared with rank 0's, so every rank reports the same.
  std::vector<uint64_t> sizes(k);
  const uint64_t size = bytes.size();
  MT_RETURN_IF_ERROR(comm_->AllGather(&size, sizeof size, sizes.data()));
  const uint64_t longest = *std::max_element(sizes.begin(), sizes.end());
  std::string padded = bytes;
  padded.resize(longest);
  std::string gathered(longest * k, '\0');
  MT_RETURN_IF_ERROR(comm_->AllGather(padded.data(), longest, gathered.data()));
  for (int r = 1; r < k; ++r) {
    if (all[2 * r + 1] == all[1]) continue;
    pb::TrainConfig first, other;
    if (first.ParseFromString(gathered.substr(0, sizes[0])) &&
        other.ParseFromString(gathered.substr(longest * r, sizes[r]))) {
      std::vector<std::string> diffs;
      const std::string where = absl::StrCat("on rank ", r);
      ConfigDifferences(first, other, "", diffs, "on rank 0", where.c_str());
      if (!diffs.empty()) why.push_back(absl::StrJoin(diffs, "; "));
    }
    break;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "data parallel: the ranks must train the same model with the same config: ", absl::StrJoin(why, "; "),
      " (this is rank ", comm_->rank(), " of ", k, ")"));
}

absl::Status Trainer::Build(std::unique_ptr<Graph> model) {
  if (device_ != nullptr) {  // given by the caller
    std::shared_ptr<Device> device = std::move(device_);
    const Backend& backend = BackendFor(device->type());
    MT_ASSIGN_OR_RETURN(std::string missing, BuildOn(std::move(model), backend, std::move(device)));
    if (!missing.empty())
      return absl::UnimplementedError(absl::StrCat("the ", backend.name(), " device: ", missing));
    return absl::OkStatus();
  }
  absl::StatusOr<DeviceRequest> request = ParseDeviceFlag(config_.device());
  if (!request.ok())
    return absl::InvalidArgumentError(absl::StrCat("config device: ", request.status().message()));
  MT_ASSIGN_OR_RETURN(
      BackendChoice choice,
      ChooseBackend(*request, "--device", "trains", [&](const Backend& b) -> absl::StatusOr<std::string> {
        MT_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, b.MakeDevice());
        // The CPU is the last choice: it may take the model.
        return BuildOn(b.type() == DeviceType::kCPU ? std::move(model) : model->Clone(), b, std::move(device));
      }));
  device_note_ = choice.note;
  return absl::OkStatus();
}

absl::StatusOr<std::string> Trainer::BuildOn(std::unique_ptr<Graph> model, const Backend& backend,
                                             std::shared_ptr<Device> device) {
  const pb::TrainConfig& c = config_;
  device_ = std::move(device);
  state_names_.clear();
  precision_ = {};
  MT_ASSIGN_OR_RETURN(TrainingRecipe recipe, ResolveTrainingRecipe(c, *model, backend.target()));
  precision_.preset = recipe.preset;
  precision_.low = recipe.low;
  precision_.scaling = !recipe.scaling ? "off" : recipe.dynamic_scaling ? "dynamic" : "static";
  precision_.note = recipe.note;

  // --- names ---
  for (Value* v : model->inputs())
    if (!v->is_initializer()) {
      input_name_ = v->name;
      break;
    }
  output_name_ = recipe.loss.output;
  labels_name_ = recipe.loss.labels;
  eval_spec_.task = c.loss() == "cross_entropy"          ? EvalTask::kClassification
                    : c.loss() == "mse" || c.loss() == "l1" ? EvalTask::kRegression
                                                            : EvalTask::kOther;
  eval_spec_.class_axis = c.class_axis();
  if (c.has_ignore_index()) eval_spec_.ignore_index = c.ignore_index();

  // --- one canonical model for the step, the eval graph and the export ---
  // Data parallel: dropout draws differ between ranks (as they do between a batch's examples in
  // one process).
  const int64_t step_seed = comm_ != nullptr ? static_cast<int64_t>(comm_->rank()) * 0x9E3779B9 : 0;
  MT_ASSIGN_OR_RETURN(TrainingGraphs built, BuildTrainingGraphs(std::move(model), recipe, step_seed));
  model_ = std::move(built.model);
  params_ = std::move(built.params);
  std::unique_ptr<Graph> g = std::move(built.step), e = std::move(built.eval);
  signature_ = SignModel(*model_, *g, params_);
  if (comm_ != nullptr) MT_RETURN_IF_ERROR(CheckRanksAgree());
  // Off the CPU, what the backend lacks is named before any session exists (the chooser falls
  // back or fails with it).
  if (backend.type() != DeviceType::kCPU)
    if (std::string missing = MissingOn(backend, {{g.get(), StateUpdates(*g)}, {e.get(), StateUpdates(*e)}});
        !missing.empty())
      return missing;
  SessionOptions so;
  so.run_on = device_;
  so.communicator = comm_;
  // CUDA graphs for the step: opt-in (MIXTRAIN_CUDA_GRAPHS=1) until they have run on a GPU.
  if (const char* e = std::getenv("MIXTRAIN_CUDA_GRAPHS"); e != nullptr && std::string(e) == "1")
    so.record_steps = true;
  for (const auto& [from, to] : StateUpdates(*g)) {
    so.state_updates[from] = to;
    state_names_.push_back(to);
  }
  train_graph_ = std::shared_ptr<Graph>(g.release());
  eval_graph_ = std::shared_ptr<Graph>(e.release());
  // Said when a plan's arena does not fit the memory left (runtime/memory_limit.h).
  so.memory_advice =
      "The step's arena shrinks with recompute: \"auto\" (--recompute=auto), a smaller batch (--batch-size), or a "
      "smaller batch accumulated over several steps (accumulate, --accumulate) to keep the batch the update sees.";
  SessionOptions eo;
  eo.run_on = device_;
  // LoRA: the frozen weights are most of the model; a prepacked copy per product reading one
  // (forward and backward: two) would double or triple the memory LoRA is there to save.
  so.cache_constant_inputs = eo.cache_constant_inputs = recipe.lora.rank == 0;
  eo.memory_advice = "A smaller evaluation batch needs less.";
  // Weights held once: on host memory the step updates its state in the graphs' own tensors,
  // which the canonical model (export) and the evaluation graph share; the eval session reads
  // them where they are, never folding or prepacking them.
  if (device_->shares_host_memory()) {
    OwnStateBuffers();
    so.state_in_graph = true;
    for (const std::string& name : state_names_)
      if (const Value* v = eval_graph_->FindValue(name); v != nullptr && v->is_initializer())
        eo.shared_state.push_back(name);
  }
  MT_ASSIGN_OR_RETURN(train_, Session::Create(std::const_pointer_cast<const Graph>(train_graph_), so));
  if (recipe.debug_precision) {
    MT_ASSIGN_OR_RETURN(debugger_, PrecisionDebugger::Create(*train_graph_));
  }

  // --- the eval graph: inference form, same loss and precision ---
  MT_ASSIGN_OR_RETURN(eval_, Session::Create(std::const_pointer_cast<const Graph>(eval_graph_), eo));
  return std::string();
}

void Trainer::OwnStateBuffers() {
  if (model_is_ours_) return;
  for (const std::string& name : state_names_) {
    Value* step = train_graph_->FindValue(name);
    MT_CHECK(step != nullptr && step->is_initializer()) << "state '" << name << "' is not an initializer of the step";
    const Tensor t = *step->initializer;
    // Tensors the passes made (optimizer moments, counters) are the step's alone.
    const Value* from_model = model_->FindValue(name);
    if (from_model == nullptr || !from_model->is_initializer() || from_model->initializer->data() != t.data()) continue;
    const Tensor own = t.Clone();
    for (Graph* g : {model_.get(), train_graph_.get(), eval_graph_.get()}) {
      Value* v = g->FindValue(name);
      if (v != nullptr && v->is_initializer() && v->initializer->data() == t.data()) g->SetInitializer(v, own);
    }
  }
}

float Trainer::LearningRate(int64_t update) const {
  const pb::ScheduleConfig& s = config_.schedule();
  double base = config_.optimizer().lr();
  int64_t warm = s.warmup_steps();
  if (warm > 0 && update < warm) return static_cast<float>(base * (update + 1) / warm);
  int64_t t = update - warm;
  switch (s.kind()) {
    case pb::ScheduleConfig::CONSTANT: return static_cast<float>(base);
    case pb::ScheduleConfig::STEP:
      return static_cast<float>(base * std::pow(s.gamma(), t / std::max(1, s.step_size())));
    case pb::ScheduleConfig::COSINE: {
      // The run's length in updates (accumulate Step() calls make one update).
      int64_t updates = (total_steps_ + config_.accumulate() - 1) / config_.accumulate();
      int64_t total = std::max<int64_t>(1, updates - warm);
      double frac = std::min(1.0, static_cast<double>(t) / total);
      return static_cast<float>(s.min_lr() + (base - s.min_lr()) * 0.5 * (1 + std::cos(kPi * frac)));
    }
  }
  return static_cast<float>(base);
}

absl::StatusOr<StepResult> Trainer::Step(const std::map<std::string, Tensor>& batch, bool read_loss) {
  // Data parallel: the loss is averaged over the ranks by a collective every rank must make, so
  // every step reads it whatever this rank's caller asked (ranks log at different steps).
  if (comm_ != nullptr) read_loss = true;
  for (const auto& [name, t] : batch)
    if (t.rank() > 0 && t.dims()[0] == 0)
      return absl::InvalidArgumentError(absl::StrCat("batch array '", name, "' has no examples"));
  StepResult r;
  int64_t acc = config_.accumulate();
  int64_t update = calls_ / acc;
  bool apply = (calls_ + 1) % acc == 0;
  r.lr = LearningRate(update);
  std::map<std::string, Tensor> feeds;
  for (Value* in : train_graph_->inputs()) {
    if (in->is_initializer()) continue;
    if (in->name == kLrName) {
      feeds.emplace(kLrName, Tensor::Scalar(r.lr));
    } else if (in->name == kApplyName) {
      Tensor a(DType::kBool, {});
      a.data_as<uint8_t>()[0] = apply;
      feeds.emplace(kApplyName, a);
    } else {
      auto it = batch.find(in->name);
      if (it == batch.end())
        return absl::InvalidArgumentError(absl::StrCat("the batch has no '", in->name, "' array"));
      feeds.emplace(in->name, it->second);
    }
  }
  const int64_t every = config_.debug_precision();
  const bool gather = debugger_ != nullptr && calls_ % every == 0;
  if ((read_loss || debugger_ != nullptr) && precision_.scaling != "off") {
    MT_ASSIGN_OR_RETURN(Tensor s, train_->GetInitializer(kLossScaleName));
    r.loss_scale = s.data_as<float>()[0];
  }
  // found_inf is copied back only with the loss (or when it costs nothing: host memory); the
  // device counts skipped updates itself (SkippedSteps), so a GPU step without read_loss does not
  // wait for the device.
  const bool read_flag = read_loss || debugger_ != nullptr || device_->shares_host_memory();
  std::vector<std::string> fetch;
  if (read_flag) fetch.push_back(kFoundInfName);
  if (read_loss) fetch.push_back(kLossName);
  if (gather) fetch.push_back(kPrecisionStatsName);
  std::vector<Tensor> out;
  if (fetch.empty()) {
    MT_RETURN_IF_ERROR(train_->Launch(feeds));
  } else {
    MT_ASSIGN_OR_RETURN(out, train_->Run(feeds, fetch));
  }
  r.skipped = read_flag && out[0].data_as<uint8_t>()[0] != 0;
  r.loss = read_loss ? static_cast<float>(out[read_flag ? 1 : 0].GetDouble(0)) : std::numeric_limits<float>::quiet_NaN();
  if (read_loss && comm_ != nullptr && comm_->size() > 1) {
    MT_RETURN_IF_ERROR(comm_->AllReduceSum(&r.loss, 1, config_.deterministic()));
    r.loss /= static_cast<float>(comm_->size());
  }
  if (gather || (debugger_ != nullptr && r.skipped)) {
    Tensor stats;
    if (gather) {
      stats = out.back();
    } else {
      MT_ASSIGN_OR_RETURN(stats, RerunForStatistics(feeds, r.loss_scale));
    }
    auto init = [&](const std::string& name) { return train_->GetInitializer(name); };
    MT_ASSIGN_OR_RETURN(r.nonfinite, debugger_->Record(stats, calls_ + 1, r.skipped, init));
    r.precision_gathered = true;
  }
  ++calls_;
  eval_stale_ = true;
  return r;
}

absl::StatusOr<int64_t> Trainer::SkippedSteps() const {
  MT_ASSIGN_OR_RETURN(Tensor t, train_->GetInitializer(kSkippedStepsName));
  return t.GetInt(0);
}

absl::StatusOr<Tensor> Trainer::RerunForStatistics(const std::map<std::string, Tensor>& feeds, float loss_scale) {
  // The step just run, again, as a dry run (no state written): the same batch, the loss scale it
  // used (a dynamic scaler has backed off since) and the same random draws (dropout).
  const uint64_t runs = train_->run_count();
  std::optional<Tensor> scale_after;
  if (precision_.scaling != "off") {
    MT_ASSIGN_OR_RETURN(scale_after, train_->GetInitializer(kLossScaleName));
    MT_RETURN_IF_ERROR(train_->SetInitializer(kLossScaleName, Tensor::Scalar(loss_scale)));
  }
  train_->set_run_count(runs - 1);
  absl::StatusOr<std::vector<Tensor>> out = train_->Run(feeds, {kPrecisionStatsName}, /*write_state=*/false);
  train_->set_run_count(runs);
  if (scale_after) MT_RETURN_IF_ERROR(train_->SetInitializer(kLossScaleName, *scale_after));
  if (!out.ok()) return out.status();
  return (*out)[0];
}

absl::Status Trainer::SyncEval() {
  if (!eval_stale_) return absl::OkStatus();
  for (const Value* v : eval_graph_->initializers()) {
    if (std::find(state_names_.begin(), state_names_.end(), v->name) == state_names_.end()) continue;
    MT_ASSIGN_OR_RETURN(Tensor t, train_->InitializerContents(v->name));
    MT_ASSIGN_OR_RETURN(Tensor mine, eval_->InitializerContents(v->name));
    if (mine.data() == t.data()) continue;  // the eval session reads the step's own buffer
    MT_RETURN_IF_ERROR(eval_->SetInitializer(v->name, t));
  }
  eval_stale_ = false;
  return absl::OkStatus();
}

absl::StatusOr<EvalResult> Trainer::Evaluate(const std::map<std::string, Tensor>& batch) {
  MT_RETURN_IF_ERROR(SyncEval());
  std::map<std::string, Tensor> feeds;
  for (Value* in : eval_graph_->inputs()) {
    if (in->is_initializer()) continue;
    auto it = batch.find(in->name);
    if (it == batch.end())
      return absl::InvalidArgumentError(absl::StrCat("the batch has no '", in->name, "' array"));
    feeds.emplace(in->name, it->second);
  }
  MT_ASSIGN_OR_RETURN(std::vector<Tensor> out, eval_->Run(feeds, {kLossName, output_name_}));
  EvalResult r;
  const Tensor& output = out[1];
  r.examples = output.rank() > 0 ? output.dims()[0] : 1;
  r.loss_sum = out[0].GetDouble(0) * static_cast<double>(r.examples);
  r.task = eval_spec_.task;
  if (eval_spec_.task == EvalTask::kClassification && output.rank() > 0) {
    const int64_t axis = eval_spec_.class_axis < 0 ? eval_spec_.class_axis + output.rank() : eval_spec_.class_axis;
    if (axis >= 0 && axis < output.rank()) r.classes = output.dims()[axis];
  }
  if (auto it = batch.find(labels_name_); it != batch.end())
    MT_RETURN_IF_ERROR(AccumulateEvalCounts(eval_spec_, output, it->second, r.counts));
  return r;
}

const Value& Trainer::LossOutput() const {
  const Value* v = eval_graph_->FindValue(output_name_);
  MT_CHECK(v != nullptr) << "the evaluation graph lost the loss's output " << output_name_;
  return *v;
}

int64_t Trainer::LabelRowsPerExample() const {
  const Value* labels = eval_graph_->FindValue(labels_name_);
  const Value* input = eval_graph_->FindValue(input_name_);
  if (labels == nullptr || input == nullptr || !labels->shape.rank_known || !input->shape.rank_known ||
      labels->shape.rank() == 0 || input->shape.rank() == 0)
    return 1;
  const std::optional<sym::Mono> rows = sym::MonoOf(labels->shape.dims[0]);
  const std::optional<sym::Mono> examples = sym::MonoOf(input->shape.dims[0]);
  if (!rows || !examples) return 1;
  const std::optional<sym::Mono> k = sym::Divide(*rows, *examples);
  return k && k->known() ? k->coef : 1;
}

std::optional<MemoryReport> Trainer::memory_report() const {
  const std::optional<PlanStats> step = train_->last_plan_stats();
  if (!step) return std::nullopt;
  const std::optional<PlanStats> eval = eval_->last_plan_stats();
  MemoryReport r = PlannedMemory(*train_graph_, *step, params_, state_names_, eval ? &*eval : nullptr);
  MeasureProcessMemory(r);
  return r;
}

absl::StatusOr<Tensor> Trainer::GetParameter(const std::string& name) const {
  return train_->GetInitializer(name);
}

absl::Status Trainer::SetParameter(const std::string& name, const Tensor& value) {
  MT_RETURN_IF_ERROR(train_->SetInitializer(name, value));
  eval_stale_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, Tensor>> Trainer::State() const {
  std::map<std::string, Tensor> s;
  for (const std::string& n : state_names_) {
    MT_ASSIGN_OR_RETURN(Tensor t, train_->GetInitializer(n));
    s.emplace(n, std::move(t));
  }
  return s;
}

absl::Status Trainer::ExportInferenceModel(const std::string& path, DType dtype) const {
  std::unique_ptr<Graph> g = model_->Clone();
  for (Value* v : std::vector<Value*>(g->initializers().begin(), g->initializers().end())) {
    if (std::find(state_names_.begin(), state_names_.end(), v->name) == state_names_.end()) continue;
    MT_ASSIGN_OR_RETURN(Tensor t, train_->InitializerContents(v->name));
    g->SetInitializer(v, t);
  }
  for (const LoraAdapter& ad : LoraAdapters(*train_graph_)) {
    Value* w = g->FindValue(ad.weight);
    MT_CHECK(w != nullptr && w->is_initializer()) << "LoRA target " << ad.weight << " is not in the model";
    MT_ASSIGN_OR_RETURN(Tensor a, train_->GetInitializer(ad.a));
    MT_ASSIGN_OR_RETURN(Tensor b, train_->GetInitializer(ad.b));
    // Under AMP W is stored in the low type (StoreLoraTargetsLow): the sum is fp32 either way.
    MT_ASSIGN_OR_RETURN(Tensor merged,
                        MergeLoraDelta(ConvertFloat(*w->initializer, DType::kF32), a, b, ad.scale, ad.transposed));
    MT_RETURN_IF_ERROR(RestoreLoraTarget(*g, w, std::move(merged)));
  }
  MT_RETURN_IF_ERROR(LowerForExport(*g, dtype));
  return SaveOnnxFile(*g, path);
}

absl::Status Trainer::ExportAdapters(const std::string& path) const {
  const std::vector<LoraAdapter> adapters = LoraAdapters(*train_graph_);
  if (adapters.empty()) return absl::FailedPreconditionError("no LoRA adapters to export (lora_rank is 0)");
  Graph g;
  g.name = "lora_adapters";
  g.producer_name = "mixtrain";
  g.opset_imports = model_->opset_imports;
  for (const LoraAdapter& ad : adapters)
    for (const std::string& name : {ad.a, ad.b}) {
      MT_ASSIGN_OR_RETURN(Tensor t, train_->GetInitializer(name));
      g.AddInitializer(name, t);
    }
  g.metadata_props.emplace_back("mixtrain.lora.rank", absl::StrCat(config_.lora_rank()));
  g.metadata_props.emplace_back(
      "mixtrain.lora.alpha",
      absl::StrCat(config_.has_lora_alpha() ? config_.lora_alpha() : 2.0f * static_cast<float>(config_.lora_rank())));
  return SaveOnnxFile(g, path);
}

}  // namespace mixtrain
