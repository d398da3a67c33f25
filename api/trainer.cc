// mixtrain::v1::Trainer: a locked pimpl over the runtime's Trainer (runtime/trainer.h), converting
// public types at the boundary and keeping exceptions from crossing it.
#include <mutex>

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
}  // namespace mixtrain::api

#include "mixtrain/trainer.h"

namespace mixtrain {
inline namespace v1 {

struct Trainer::Impl {
  mutable std::mutex mu;
  std::unique_ptr<api::RtTrainer> rt;
  TrainConfig config;
};

namespace {

std::vector<TensorInfo> InfoOf(const Graph& g) {
  std::vector<TensorInfo> out;
  for (const Value* v : g.inputs()) {
    if (v->is_initializer()) continue;
    TensorInfo info;
    info.name = v->name;
    info.type = api::ToElementType(v->dtype).value_or(ElementType::kFloat32);
    for (const Dim& d : v->shape.dims) info.shape.push_back(d.known() ? d.value : -1);
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const std::string& model_path,
                                                         const TrainConfig& config) {
  return api::Guarded("Trainer::Create", [&]() -> absl::StatusOr<std::unique_ptr<Trainer>> {
    auto impl = std::make_unique<Impl>();
    MT_ASSIGN_OR_RETURN(impl->rt, api::RtTrainer::Create(model_path, api::ToProto(config)));
    impl->config = config;
    return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
  });
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::CreateFromBytes(std::string_view onnx_bytes,
                                                                  const TrainConfig& config) {
  return api::Guarded("Trainer::CreateFromBytes", [&]() -> absl::StatusOr<std::unique_ptr<Trainer>> {
    auto impl = std::make_unique<Impl>();
    MT_ASSIGN_OR_RETURN(impl->rt, api::RtTrainer::CreateFromBytes(std::string(onnx_bytes), api::ToProto(config)));
    impl->config = config;
    return std::unique_ptr<Trainer>(new Trainer(std::move(impl)));
  });
}

std::vector<TensorInfo> Trainer::BatchInputs() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return InfoOf(impl_->rt->EvalGraph());
}

absl::StatusOr<StepResult> Trainer::Step(const TensorMap& batch, StepOptions options) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return api::Guarded("Trainer::Step", [&]() -> absl::StatusOr<StepResult> {
    MT_ASSIGN_OR_RETURN(api::RtStepResult r, impl_->rt->Step(api::ToTensors(batch), options.read_loss));
    StepResult out;
    if (options.read_loss) out.loss = r.loss;
    out.loss_scale = r.loss_scale;
    out.skipped = r.skipped;
    out.learning_rate = r.lr;
    out.step = impl_->rt->calls();
    return out;
  });
}

absl::StatusOr<EvalResult> Trainer::Evaluate(const TensorMap& batch) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return api::Guarded("Trainer::Evaluate", [&]() -> absl::StatusOr<EvalResult> {
    MT_ASSIGN_OR_RETURN(api::RtEvalResult r, impl_->rt->Evaluate(api::ToTensors(batch)));
    return EvalResult{r.loss_sum, r.correct, r.examples};
  });
}

absl::Status Trainer::SaveCheckpoint(const std::string& path, TrainingPosition position) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return api::Guarded("Trainer::SaveCheckpoint", [&] {
    return impl_->rt->SaveCheckpoint(path, position.epoch, position.batch);
  });
}

absl::StatusOr<TrainingPosition> Trainer::LoadCheckpoint(const std::string& path) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return api::Guarded("Trainer::LoadCheckpoint", [&]() -> absl::StatusOr<TrainingPosition> {
    MT_ASSIGN_OR_RETURN(auto pos, impl_->rt->LoadCheckpoint(path));
    return TrainingPosition{pos.first, pos.second};
  });
}

absl::Status Trainer::ExportInferenceModel(const std::string& path, ElementType type) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return api::Guarded("Trainer::ExportInferenceModel", [&] {
    return impl_->rt->ExportInferenceModel(path, api::ToDType(type));
  });
}

absl::StatusOr<std::string> Trainer::TransformedGraph(GraphFormat format) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return api::Guarded("Trainer::TransformedGraph", [&]() -> absl::StatusOr<std::string> {
    const Graph& g = impl_->rt->TransformedGraph();
    switch (format) {
      case GraphFormat::kText: return GraphToText(g);
      case GraphFormat::kDot: return GraphToDot(g);
      case GraphFormat::kOnnx: return SerializeDeterministic(ExportOnnx(g));
    }
    return absl::InvalidArgumentError("unknown GraphFormat");
  });
}

std::vector<std::string> Trainer::ParameterNames() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->rt->ParameterNames();
}

absl::StatusOr<HostTensor> Trainer::GetParameter(const std::string& name) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return api::Guarded("Trainer::GetParameter", [&]() -> absl::StatusOr<HostTensor> {
    MT_ASSIGN_OR_RETURN(Tensor t, impl_->rt->GetParameter(name));
    return api::ToHostTensor(t);
  });
}

absl::Status Trainer::SetParameter(const std::string& name, const HostTensor& value) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return api::Guarded("Trainer::SetParameter", [&] {
    return impl_->rt->SetParameter(name, api::ToTensor(value));
  });
}

void Trainer::SetTotalSteps(int64_t steps) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->rt->set_total_steps(steps);
}

int64_t Trainer::steps_taken() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->rt->calls();
}

ResolvedPrecision Trainer::precision() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto& p = impl_->rt->precision();
  return {p.preset, api::ToElementType(p.low).value_or(ElementType::kFloat32), p.scaling};
}

const TrainConfig& Trainer::config() const { return impl_->config; }

}  // namespace v1
}  // namespace mixtrain
