#include "runtime/trainer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "graph/atomic_file.h"
#include "graph/check.h"
#include "graph/external_data.h"
#include "kernels/cpu/dnnl_common.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "graph/shape_inference.h"
#include "passes/pipeline.h"
#include "passes/passes.h"
#include "passes/precision.h"
#include "passes/training.h"

namespace mixtrain {
namespace {

constexpr double kPi = 3.14159265358979323846;

}  // namespace

StepPhase PhaseOf(const Node& n) {
  const std::string& name = n.name();
  if (name.find("/grad") != std::string::npos) return StepPhase::kBackward;
  if (name.rfind("loss/", 0) == 0 || name.rfind("loss_scale/", 0) == 0) return StepPhase::kLoss;
  for (const char* p : {"adam/", "adamw/", "sgd/", "adagrad/", "amp/", "step/", "clip/", "accum/"})
    if (name.rfind(p, 0) == 0) return StepPhase::kOptimizer;
  return StepPhase::kForward;
}

const char* StepPhaseName(StepPhase p) {
  switch (p) {
    case StepPhase::kForward: return "forward";
    case StepPhase::kLoss: return "loss";
    case StepPhase::kBackward: return "backward";
    case StepPhase::kOptimizer: return "optimizer";
  }
  return "?";
}

std::vector<StepNodeTime> Trainer::Profile() const {
  std::vector<StepNodeTime> out;
  for (const NodeProfile& p : train_->ProfileByNode())
    out.push_back({p.node, PhaseOf(*p.node), p.calls, p.seconds, p.allocations, p.flops, p.bytes});
  return out;
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const std::string& model_path,
                                                         const pb::TrainConfig& config) {
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(model_path));
  return CreateFromGraph(std::move(g), config);
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::CreateFromBytes(const std::string& bytes,
                                                                  const pb::TrainConfig& config) {
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxBytes(bytes, "."));
  return CreateFromGraph(std::move(g), config);
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::CreateFromGraph(std::unique_ptr<Graph> model,
                                                                  const pb::TrainConfig& config) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->config_ = config;
  t->total_steps_ = config.steps();
  MT_RETURN_IF_ERROR(t->Build(std::move(model)));
  return t;
}

absl::Status Trainer::Build(std::unique_ptr<Graph> model) {
  const pb::TrainConfig& c = config_;
  if (c.device() != "cpu" && c.device() != "auto")
    return absl::UnimplementedError(absl::StrCat("device '", c.device(),
                                                 "': this build trains on the CPU only"));
  MT_ASSIGN_OR_RETURN(TrainingRecipe recipe, ResolveTrainingRecipe(c, *model, dnnl_util::NativeBf16()));
  precision_.preset = recipe.preset;
  precision_.low = recipe.low;
  precision_.scaling = !recipe.scaling ? "off" : recipe.dynamic_scaling ? "dynamic" : "static";
  if (!recipe.note.empty())
    precision_.note = absl::StrCat(recipe.note, " (oneDNN ISA ", dnnl_util::DnnlIsaName(), ")");

  // --- names ---
  for (Value* v : model->inputs())
    if (!v->is_initializer()) {
      input_name_ = v->name;
      break;
    }
  output_name_ = recipe.loss.output;
  labels_name_ = recipe.loss.labels;
  classification_ = c.loss() == "cross_entropy";

  // --- one canonical model for the step, the eval graph and the export ---
  MT_RETURN_IF_ERROR(PrepareModel(*model, recipe));
  model_ = model->Clone();

  // --- the training step ---
  std::unique_ptr<Graph> g = model->Clone();
  MT_ASSIGN_OR_RETURN(params_, BuildTrainingStep(*g, recipe));
  SessionOptions so;
  for (const auto& [from, to] : StateUpdates(*g)) {
    so.state_updates[from] = to;
    state_names_.push_back(to);
  }
  train_graph_ = std::shared_ptr<Graph>(g.release());
  MT_ASSIGN_OR_RETURN(train_, Session::Create(std::const_pointer_cast<const Graph>(train_graph_), so));

  // --- the eval graph: inference form, same loss and precision ---
  std::unique_ptr<Graph> e = model->Clone();
  MT_RETURN_IF_ERROR(BuildEvalGraph(*e, recipe));
  eval_graph_ = std::shared_ptr<Graph>(e.release());
  MT_ASSIGN_OR_RETURN(eval_, Session::Create(std::const_pointer_cast<const Graph>(eval_graph_)));
  return absl::OkStatus();
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
  if (read_loss && precision_.scaling != "off") {
    MT_ASSIGN_OR_RETURN(Tensor s, train_->GetInitializer(kLossScaleName));
    r.loss_scale = s.data_as<float>()[0];
  }
  std::vector<std::string> fetch = {kFoundInfName};
  if (read_loss) fetch.push_back(kLossName);
  MT_ASSIGN_OR_RETURN(std::vector<Tensor> out, train_->Run(feeds, fetch));
  r.skipped = out[0].data_as<uint8_t>()[0] != 0;
  r.loss = read_loss ? static_cast<float>(out[1].GetDouble(0)) : std::numeric_limits<float>::quiet_NaN();
  ++calls_;
  eval_stale_ = true;
  return r;
}

absl::Status Trainer::SyncEval() {
  if (!eval_stale_) return absl::OkStatus();
  for (const Value* v : eval_graph_->initializers()) {
    if (std::find(state_names_.begin(), state_names_.end(), v->name) == state_names_.end()) continue;
    MT_ASSIGN_OR_RETURN(Tensor t, train_->GetInitializer(v->name));
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
  const Tensor& logits = out[1];
  r.examples = logits.rank() > 0 ? logits.dims()[0] : 1;
  r.loss_sum = out[0].GetDouble(0) * static_cast<double>(r.examples);
  if (classification_ && logits.rank() == 2 && batch.contains(labels_name_)) {
    const Tensor& labels = batch.at(labels_name_);
    int64_t n = logits.dims()[0], k = logits.dims()[1];
    for (int64_t i = 0; i < n; ++i) {
      int64_t best = 0;
      for (int64_t j = 1; j < k; ++j)
        if (logits.GetDouble(i * k + j) > logits.GetDouble(i * k + best)) best = j;
      r.correct += best == labels.GetInt(i);
    }
  }
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

absl::Status Trainer::SaveCheckpoint(const std::string& path, int64_t epoch, int64_t batch) const {
  pb::Checkpoint ck;
  ck.set_step(calls_);
  ck.set_rng_offset(train_->run_count());  // Dropout masks are drawn from (seed, run count)
  ck.set_epoch(epoch);
  ck.set_batch_in_epoch(batch);
  ck.set_rng_seed(config_.data().seed());
  *ck.mutable_config() = config_;
  MT_ASSIGN_OR_RETURN(auto state, State());
  for (const auto& [name, t] : state) {
    onnx::TensorProto* p = ck.add_state();
    TensorToProto(t, p);
    p->set_name(name);
  }
  std::string bytes;
  if (!ck.SerializeToString(&bytes))
    return absl::InternalError(absl::StrCat("cannot serialize the checkpoint for ", path));
  return WriteFileAtomically(path, bytes);
}

absl::StatusOr<std::pair<int64_t, int64_t>> Trainer::LoadCheckpoint(const std::string& path) {
  std::string bytes;
  {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return absl::NotFoundError(absl::StrCat("cannot open checkpoint '", path, "'"));
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.append(buf, n);
    std::fclose(f);
  }
  pb::Checkpoint ck;
  if (!ck.ParseFromString(bytes))
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a mixtrain checkpoint"));
  std::map<std::string, Tensor> loaded;
  for (const onnx::TensorProto& p : ck.state()) {
    MT_ASSIGN_OR_RETURN(Tensor t, TensorFromProto(p, "", absl::StrCat("checkpoint tensor '", p.name(), "'")));
    loaded.emplace(p.name(), std::move(t));
  }
  for (const std::string& n : state_names_)
    if (!loaded.contains(n))
      return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path, "' lacks state '", n,
                                                     "' (made for another model or config?)"));
  for (const auto& [n, t] : loaded) {
    absl::Status s = train_->SetInitializer(n, t);
    if (!s.ok())
      return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path, "': ", s.message()));
  }
  calls_ = ck.step();
  train_->set_run_count(ck.rng_offset());
  eval_stale_ = true;
  return std::make_pair(ck.epoch(), ck.batch_in_epoch());
}

absl::Status Trainer::ExportInferenceModel(const std::string& path, DType dtype) const {
  std::unique_ptr<Graph> g = model_->Clone();
  for (Value* v : std::vector<Value*>(g->initializers().begin(), g->initializers().end())) {
    if (std::find(state_names_.begin(), state_names_.end(), v->name) == state_names_.end()) continue;
    MT_ASSIGN_OR_RETURN(Tensor t, train_->GetInitializer(v->name));
    g->SetInitializer(v, t);
  }
  MT_RETURN_IF_ERROR(LowerForExport(*g, dtype));
  return SaveOnnxFile(*g, path);
}

}  // namespace mixtrain
