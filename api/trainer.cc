// mixtrain::v1::Trainer: a locked pimpl over the runtime's Trainer (runtime/trainer.h), converting
// public types at the boundary and keeping exceptions from crossing it, plus StepAsync's queue
// and worker thread.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "api/convert.h"
#include "graph/onnx_export.h"
#include "graph/text_format.h"
#include "runtime/trainer.h"

// The runtime's Trainer, StepResult, EvalResult and ResolvedPrecision share their names with the
// public API's (which live in the inline namespace mixtrain::v1); alias the runtime's before the
// public header makes the plain names ambiguous.
namespace mixtrain::api {
using RtTrainer = ::mixtrain::Trainer;
using RtStepResult = ::mixtrain::StepResult;
using RtEvalResult = ::mixtrain::EvalResult;
using RtCheckpointPosition = ::mixtrain::CheckpointPosition;
}  // namespace mixtrain::api

#include "mixtrain/trainer.h"
#include "passes/precision.h"

namespace mixtrain {
inline namespace v1 {

struct Trainer::Impl {
  std::mutex mu;  // one call into the runtime trainer at a time
  std::unique_ptr<api::RtTrainer> rt;
  TrainConfig config;

  // StepAsync's queue, run in call order by one worker thread started on first use.
  std::mutex queue_mu;
  std::condition_variable queue_cv;
  std::deque<std::function<void()>> queue;
  bool busy = false, stop = false;
  std::thread worker;

  ~Impl() {
    {
      std::lock_guard<std::mutex> l(queue_mu);
      stop = true;
    }
    queue_cv.notify_all();
    if (worker.joinable()) worker.join();  // runs what is still queued first
  }

  void Enqueue(std::function<void()> task) {
    std::lock_guard<std::mutex> l(queue_mu);
    queue.push_back(std::move(task));
    if (!worker.joinable()) worker = std::thread([this] { Work(); });
    queue_cv.notify_all();
  }

  void Work() {
    std::unique_lock<std::mutex> l(queue_mu);
    for (;;) {
      queue_cv.wait(l, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;  // stopping, nothing left
      std::function<void()> task = std::move(queue.front());
      queue.pop_front();
      busy = true;
      l.unlock();
      task();
      l.lock();
      busy = false;
      queue_cv.notify_all();
    }
  }

  // Every other call first waits for the queued steps, so calls take effect in call order.
  std::unique_lock<std::mutex> Lock() {
    {
      std::unique_lock<std::mutex> l(queue_mu);
      queue_cv.wait(l, [&] { return queue.empty() && !busy; });
    }
    return std::unique_lock<std::mutex>(mu);
  }
};

namespace {

ValueStats ToPublic(const PrecisionValue& v) {
  ValueStats o;
  o.value = v.value;
  o.node = v.node;
  o.op_type = v.op_type;
  o.phase = StepPhaseName(v.phase);
  o.dtype = v.dtype == DType::kF16 ? "fp16" : v.dtype == DType::kBF16 ? "bf16" : v.dtype == DType::kF32 ? "fp32" : DTypeName(v.dtype);
  o.cast_input = v.cast_input;
  o.inputs = v.inputs;
  o.consumers = v.consumers;
  o.elements = v.stats.elements;
  o.max_abs = v.stats.max_abs;
  o.nan = v.stats.nan;
  o.inf = v.stats.inf;
  o.overflow = v.stats.overflow;
  o.underflow = v.stats.underflow;
  o.subnormal = v.stats.subnormal;
  o.zero = v.stats.zero;
  return o;
}

NonFiniteReport ToPublic(const PrecisionDiagnosis& d) {
  NonFiniteReport o;
  o.step = d.step;
  o.value = ToPublic(d.value);
  for (const PrecisionValue& v : d.inputs) o.inputs.push_back(ToPublic(v));
  return o;
}

PrecisionStatistics ToPublic(const PrecisionReport& r) {
  PrecisionStatistics o;
  o.steps = r.steps;
  for (const PrecisionValue& v : r.values) o.values.push_back(ToPublic(v));
  for (const PrecisionDiagnosis& d : r.skipped) o.skipped.push_back(ToPublic(d));
  o.skipped_steps = r.skipped_steps;
  return o;
}

absl::StatusOr<StepResult> RunStep(api::RtTrainer& rt, const TensorMap& batch, StepOptions options) {
  return api::Guarded("Trainer::Step", [&]() -> absl::StatusOr<StepResult> {
    MT_ASSIGN_OR_RETURN(api::RtStepResult r, rt.Step(api::ToTensors(batch), options.read_loss));
    StepResult out;
    if (options.read_loss) out.loss = r.loss;
    out.loss_scale = r.loss_scale;
    out.skipped = r.skipped;
    out.learning_rate = r.lr;
    out.step = rt.calls();
    out.precision_measured = r.precision_gathered;
    if (r.nonfinite) out.nonfinite = ToPublic(*r.nonfinite);
    return out;
  });
}

}  // namespace

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const std::string& model_path,
                                                         const TrainConfig& config,
                                                         std::shared_ptr<Communicator> communicator) {
  return api::Guarded("Trainer::Create", [&]() -> absl::StatusOr<std::unique_ptr<Trainer>> {
    MT_RETURN_IF_ERROR(config.Validate());
    auto impl = std::make_unique<Impl>();
    MT_ASSIGN_OR_RETURN(impl->rt, api::RtTrainer::Create(model_path, api::ToProto(config), std::move(communicator)));
    impl->config = config;
    return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
  });
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::CreateFromBytes(std::string_view onnx_bytes,
                                                                  const TrainConfig& config,
                                                                  std::shared_ptr<Communicator> communicator) {
  return api::Guarded("Trainer::CreateFromBytes", [&]() -> absl::StatusOr<std::unique_ptr<Trainer>> {
    MT_RETURN_IF_ERROR(config.Validate());
    auto impl = std::make_unique<Impl>();
    MT_ASSIGN_OR_RETURN(impl->rt, api::RtTrainer::CreateFromBytes(std::string(onnx_bytes), api::ToProto(config),
                                                                  std::move(communicator)));
    impl->config = config;
    return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
  });
}

std::vector<TensorInfo> Trainer::BatchInputs() const {
  auto lock = impl_->Lock();
  return api::InputInfos(impl_->rt->EvalGraph());
}

TensorInfo Trainer::LossOutput() const {
  auto lock = impl_->Lock();
  return api::InfoOf(impl_->rt->LossOutput());
}

int64_t Trainer::LabelRowsPerExample() const {
  auto lock = impl_->Lock();
  return impl_->rt->LabelRowsPerExample();
}

absl::StatusOr<StepResult> Trainer::Step(const TensorMap& batch, StepOptions options) {
  auto lock = impl_->Lock();
  return RunStep(*impl_->rt, batch, options);
}

std::future<absl::StatusOr<StepResult>> Trainer::StepAsync(TensorMap batch, StepOptions options) {
  auto task = std::make_shared<std::packaged_task<absl::StatusOr<StepResult>()>>(
      [impl = impl_.get(), batch = std::move(batch), options] {
        std::lock_guard<std::mutex> lock(impl->mu);
        return RunStep(*impl->rt, batch, options);
      });
  std::future<absl::StatusOr<StepResult>> result = task->get_future();
  impl_->Enqueue([task] { (*task)(); });
  return result;
}

absl::StatusOr<EvalResult> Trainer::Evaluate(const TensorMap& batch) {
  auto lock = impl_->Lock();
  return api::Guarded("Trainer::Evaluate", [&]() -> absl::StatusOr<EvalResult> {
    MT_ASSIGN_OR_RETURN(api::RtEvalResult r, impl_->rt->Evaluate(api::ToTensors(batch)));
    EvalResult e;
    e.task = r.task == EvalTask::kClassification ? EvalResult::Task::kClassification
             : r.task == EvalTask::kRegression   ? EvalResult::Task::kRegression
                                                 : EvalResult::Task::kOther;
    e.loss_sum = r.loss_sum;
    e.examples = r.examples;
    e.positions = r.counts.positions;
    e.correct = r.counts.correct;
    e.correct_top5 = r.counts.correct_top5;
    e.classes = r.classes;
    e.abs_error_sum = r.counts.abs_error_sum;
    e.squared_error_sum = r.counts.squared_error_sum;
    return e;
  });
}

EvalResult& EvalResult::operator+=(const EvalResult& o) {
  if (task == Task::kOther) task = o.task;
  loss_sum += o.loss_sum;
  examples += o.examples;
  positions += o.positions;
  correct += o.correct;
  correct_top5 += o.correct_top5;
  classes = std::max(classes, o.classes);
  abs_error_sum += o.abs_error_sum;
  squared_error_sum += o.squared_error_sum;
  return *this;
}

std::vector<std::pair<std::string, double>> EvalResult::Metrics() const {
  std::vector<std::pair<std::string, double>> m;
  if (examples == 0) return m;
  const double loss = loss_sum / static_cast<double>(examples);
  m.emplace_back("loss", loss);
  if (task == Task::kClassification) {
    m.emplace_back("perplexity", std::exp(loss));
    if (positions > 0) {
      m.emplace_back("top1", static_cast<double>(correct) / static_cast<double>(positions));
      if (classes >= 10) m.emplace_back("top5", static_cast<double>(correct_top5) / static_cast<double>(positions));
    }
  } else if (task == Task::kRegression && positions > 0) {
    m.emplace_back("mae", abs_error_sum / static_cast<double>(positions));
    m.emplace_back("rmse", std::sqrt(squared_error_sum / static_cast<double>(positions)));
  }
  return m;
}

absl::Status Trainer::SaveCheckpoint(const std::string& path, TrainingPosition position) const {
  auto lock = impl_->Lock();
  return api::Guarded("Trainer::SaveCheckpoint", [&] {
    return impl_->rt->SaveCheckpoint(path, {position.epoch, position.batch, position.best_eval_loss,
                                            position.best_eval_step, position.evals_since_best});
  });
}

absl::StatusOr<TrainingPosition> Trainer::LoadCheckpoint(const std::string& path) {
  auto lock = impl_->Lock();
  return api::Guarded("Trainer::LoadCheckpoint", [&]() -> absl::StatusOr<TrainingPosition> {
    MT_ASSIGN_OR_RETURN(api::RtCheckpointPosition p, impl_->rt->LoadCheckpointPosition(path));
    return TrainingPosition{p.epoch, p.batch, p.best_eval_loss, p.best_eval_step, p.evals_since_best};
  });
}

absl::StatusOr<CheckpointInfo> ReadCheckpointInfo(const std::string& path) {
  return api::Guarded("ReadCheckpointInfo", [&]() -> absl::StatusOr<CheckpointInfo> {
    MT_ASSIGN_OR_RETURN(pb::Checkpoint ck, ReadCheckpointFile(path));
    CheckpointInfo info;
    info.config = api::FromProto(ck.config());
    info.position = {ck.epoch(), ck.batch_in_epoch()};
    if (ck.has_best_eval_loss())
      info.position = {ck.epoch(), ck.batch_in_epoch(), ck.best_eval_loss(), ck.best_eval_step(),
                       ck.evals_since_best()};
    info.steps = ck.step();
    info.planned_steps = ck.planned_steps();
    info.precision = ck.precision();
    info.world_size = ck.world_size();
    return info;
  });
}

absl::Status Trainer::ExportInferenceModel(const std::string& path, ElementType type) const {
  auto lock = impl_->Lock();
  return api::Guarded("Trainer::ExportInferenceModel", [&] {
    return impl_->rt->ExportInferenceModel(path, api::ToDType(type));
  });
}

absl::Status Trainer::ExportAdapters(const std::string& path) const {
  auto lock = impl_->Lock();
  return api::Guarded("Trainer::ExportAdapters", [&] { return impl_->rt->ExportAdapters(path); });
}

absl::StatusOr<std::string> Trainer::TransformedGraph(GraphFormat format) const {
  auto lock = impl_->Lock();
  return api::Guarded("Trainer::TransformedGraph", [&]() -> absl::StatusOr<std::string> {
    const Graph& g = impl_->rt->TransformedGraph();
    switch (format) {
      // As `mixtrain dump --passes=train` prints it: the graph, then the precision report.
      case GraphFormat::kText: return GraphToText(g) + "\n" + PrecisionReportText(g);
      case GraphFormat::kDot: return GraphToDot(g);
      case GraphFormat::kOnnx: return SerializeDeterministic(ExportOnnx(g));
    }
    return absl::InvalidArgumentError("unknown GraphFormat");
  });
}

std::optional<PlanStatistics> Trainer::StepPlanStatistics() const {
  auto lock = impl_->Lock();
  const std::optional<PlanStats> st = impl_->rt->step_plan_stats();
  if (!st) return std::nullopt;
  return api::ToPlanStatistics(*st);
}

std::optional<MemoryStatistics> Trainer::StepMemoryStatistics() const {
  auto lock = impl_->Lock();
  const std::optional<MemoryReport> r = impl_->rt->memory_report();
  if (!r) return std::nullopt;
  return api::ToMemoryStatistics(*r);
}

std::vector<std::string> Trainer::ParameterNames() const {
  auto lock = impl_->Lock();
  return impl_->rt->ParameterNames();
}

absl::StatusOr<HostTensor> Trainer::GetParameter(const std::string& name) const {
  auto lock = impl_->Lock();
  return api::Guarded("Trainer::GetParameter", [&]() -> absl::StatusOr<HostTensor> {
    MT_ASSIGN_OR_RETURN(Tensor t, impl_->rt->GetParameter(name));
    return api::ToHostTensor(t);
  });
}

absl::Status Trainer::SetParameter(const std::string& name, const HostTensor& value) {
  auto lock = impl_->Lock();
  return api::Guarded("Trainer::SetParameter", [&] {
    return impl_->rt->SetParameter(name, api::ToTensor(value));
  });
}

void Trainer::SetTotalSteps(int64_t steps) {
  auto lock = impl_->Lock();
  impl_->rt->set_total_steps(steps);
}

int64_t Trainer::steps_taken() const {
  auto lock = impl_->Lock();
  return impl_->rt->calls();
}

absl::StatusOr<int64_t> Trainer::skipped_steps() const {
  return api::Guarded("Trainer::skipped_steps", [&]() -> absl::StatusOr<int64_t> {
    auto lock = impl_->Lock();
    return impl_->rt->SkippedSteps();
  });
}

int Trainer::rank() const {
  auto lock = impl_->Lock();
  return impl_->rt->rank();
}

int Trainer::world_size() const {
  auto lock = impl_->Lock();
  return impl_->rt->world_size();
}

ResolvedPrecision Trainer::precision() const {
  auto lock = impl_->Lock();
  const auto& p = impl_->rt->precision();
  return {PrecisionPresetName(p.preset), api::ToElementType(p.low).value_or(ElementType::kFloat32), p.scaling, p.note};
}

ResolvedDevice Trainer::device() const {
  auto lock = impl_->Lock();
  return {impl_->rt->device_name(), impl_->rt->device_note()};
}

const TrainConfig& Trainer::config() const { return impl_->config; }

void Trainer::SetProfiling(bool on) {
  auto lock = impl_->Lock();
  impl_->rt->set_profiling(on);
}

std::vector<Trainer::NodeTime> Trainer::Profile() const {
  auto lock = impl_->Lock();
  std::vector<NodeTime> out;
  for (const StepNodeTime& t : impl_->rt->Profile())
    out.push_back({t.node->name(), t.node->op_type(), StepPhaseName(t.phase), t.calls, t.seconds,
                   t.allocations, t.flops, t.bytes});
  return out;
}

absl::StatusOr<PrecisionStatistics> Trainer::PrecisionStats(StatisticsOf which) const {
  auto lock = impl_->Lock();
  const PrecisionDebugger* d = impl_->rt->precision_debugger();
  if (d == nullptr)
    return absl::FailedPreconditionError("the precision debugger is off: set TrainConfig::debug_precision to N > 0");
  if (which == StatisticsOf::kSummary) return ToPublic(d->summary());
  return d->last() ? ToPublic(*d->last()) : PrecisionStatistics{};
}

void Trainer::ResetProfile() {
  auto lock = impl_->Lock();
  impl_->rt->ResetProfile();
}

}  // namespace v1
}  // namespace mixtrain

namespace mixtrain::api {

PlanStatistics ToPlanStatistics(const PlanStats& s) {
  PlanStatistics out;
  out.peak_planned_bytes = s.peak_planned_bytes;
  out.naive_bytes = s.naive_bytes;
  out.kernels = s.steps;
  out.folded_nodes = s.folded_nodes;
  out.view_nodes = s.view_nodes;
  out.inplace_outputs = s.inplace_outputs;
  return out;
}

MemoryStatistics ToMemoryStatistics(const MemoryReport& r) {
  MemoryStatistics out;
  out.weights = r.weights;
  out.gradients = r.gradients;
  out.optimizer_state = r.optimizer_state;
  out.constants = r.constants;
  out.activations_kept = r.activations_kept;
  for (const auto& [node, bytes] : r.largest_kept)
    out.largest_kept.emplace_back(absl::StrCat(node->name(), " (", node->op_type(), ")"), bytes);
  out.arena = r.arena;
  out.arena_peak_live = r.arena_peak_live;
  for (const auto& [phase, bytes] : r.phase_peaks) out.phase_peaks.emplace_back(StepPhaseName(phase), bytes);
  out.eval_arena = r.eval_arena;
  out.planned = r.planned;
  out.measured_peak_rss = r.measured_peak_rss;
  out.measured_rss = r.measured_rss;
  return out;
}

}  // namespace mixtrain::api
