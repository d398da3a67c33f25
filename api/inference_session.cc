// mixtrain::v1::InferenceSession: a locked pimpl over the runtime's Session (runtime/session.h)
// for an imported ONNX model, optionally lowered to compute in fp16/bf16 (passes/low_precision.h).
#include <mutex>

#include "api/convert.h"
#include "graph/onnx_import.h"
#include "mixtrain/inference_session.h"
#include "passes/inference.h"
#include "passes/low_precision.h"
#include "runtime/session.h"

namespace mixtrain {
inline namespace v1 {

struct InferenceSession::Impl {
  std::mutex mu;
  InferenceOptions options;
  std::shared_ptr<const Graph> graph;
  std::unique_ptr<Session> session;
};

namespace {

// Lowers `g` to options.compute_type when that is f16/bf16.
absl::StatusOr<std::shared_ptr<const Graph>> Prepare(std::unique_ptr<Graph> g, const InferenceOptions& options) {
  DType compute = api::ToDType(options.compute_type);
  if (compute != DType::kF32) {
    if (!IsLowFloat(compute))
      return absl::InvalidArgumentError(absl::StrCat("InferenceOptions::compute_type must be f32, f16 or bf16, not ",
                                                     ElementTypeName(options.compute_type)));
    MT_RETURN_IF_ERROR(LowerFloatModel(*g, compute));
  }
  if (options.optimize) MT_RETURN_IF_ERROR(OptimizeForInference(*g));
  return std::shared_ptr<const Graph>(std::move(g));
}

}  // namespace

InferenceSession::InferenceSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
InferenceSession::~InferenceSession() = default;

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::Create(const std::string& model_path,
                                                                           const InferenceOptions& options) {
  return api::Guarded("InferenceSession::Create", [&]() -> absl::StatusOr<std::unique_ptr<InferenceSession>> {
    MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(model_path));
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    MT_ASSIGN_OR_RETURN(impl->graph, Prepare(std::move(g), options));
    MT_ASSIGN_OR_RETURN(impl->session, Session::Create(impl->graph));
    return std::unique_ptr<InferenceSession>(new InferenceSession(std::move(impl)));
  });
}

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::CreateFromBytes(std::string_view onnx_bytes,
                                                                                    const InferenceOptions& options) {
  return api::Guarded("InferenceSession::CreateFromBytes",
                      [&]() -> absl::StatusOr<std::unique_ptr<InferenceSession>> {
    // No base folder: a model given as bytes must keep its weights inline.
    MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxBytes(std::string(onnx_bytes), ""));
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    MT_ASSIGN_OR_RETURN(impl->graph, Prepare(std::move(g), options));
    MT_ASSIGN_OR_RETURN(impl->session, Session::Create(impl->graph));
    return std::unique_ptr<InferenceSession>(new InferenceSession(std::move(impl)));
  });
}

std::vector<TensorInfo> InferenceSession::Inputs() const { return api::InputInfos(*impl_->graph); }

std::vector<std::string> InferenceSession::OutputNames() const {
  std::vector<std::string> out;
  for (const Value* v : impl_->graph->outputs()) out.push_back(v->name);
  return out;
}

absl::StatusOr<TensorMap> InferenceSession::Run(const TensorMap& feeds, const std::vector<std::string>& fetch) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return api::Guarded("InferenceSession::Run", [&]() -> absl::StatusOr<TensorMap> {
    std::vector<std::string> names = fetch.empty() ? OutputNames() : fetch;
    std::map<std::string, Tensor> inputs = api::ToTensors(feeds);
    const DType compute = api::ToDType(impl_->options.compute_type);
    if (compute != DType::kF32)
      for (auto& [name, t] : inputs)  // fp32 data for a lowered input
        if (const Value* v = impl_->graph->FindValue(name); v != nullptr && v->dtype == compute)
          t = ConvertFloat(t, compute);
    MT_ASSIGN_OR_RETURN(std::vector<Tensor> outs, impl_->session->Run(inputs, names));
    if (outs.size() != names.size())
      return absl::InternalError(absl::StrCat("InferenceSession::Run: ", outs.size(), " outputs for ",
                                              names.size(), " fetches"));
    TensorMap result;
    for (size_t i = 0; i < names.size(); ++i) {
      MT_ASSIGN_OR_RETURN(HostTensor t, api::ToHostTensor(impl_->options.float32_outputs
                                                              ? ConvertFloat(outs[i], DType::kF32)
                                                              : outs[i]));
      result.emplace(names[i], std::move(t));
    }
    return result;
  });
}

std::optional<PlanStatistics> InferenceSession::LastPlanStatistics() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const PlanStats* st = impl_->session->last_plan_stats();
  if (st == nullptr) return std::nullopt;
  PlanStatistics out;
  out.peak_planned_bytes = st->peak_planned_bytes;
  out.naive_bytes = st->naive_bytes;
  out.kernels = st->steps;
  out.folded_nodes = st->folded_nodes;
  out.view_nodes = st->view_nodes;
  out.inplace_outputs = st->inplace_outputs;
  return out;
}

void InferenceSession::SetProfiling(bool on) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->session->set_profiling(on);
}

std::vector<OpTypeTime> InferenceSession::Profile() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<OpTypeTime> out;
  for (const OpProfile& p : impl_->session->Profile())
    out.push_back(OpTypeTime{.op_type = p.op_type, .calls = p.calls, .seconds = p.seconds});
  return out;
}

}  // namespace v1
}  // namespace mixtrain
