// mixtrain::v1::InferenceSession: a pimpl over the runtime's Session (runtime/session.h) for an
// imported ONNX model, optionally lowered to compute in fp16/bf16 (passes/low_precision.h). The
// Session does the locking (its thread contract is this class's: docs/embedding.md, "Threads");
// everything here past Create is fixed.
#include "api/convert.h"
#include "graph/onnx_import.h"
#include "mixtrain/inference_session.h"
#include "passes/canonicalize.h"
#include "passes/inference.h"
#include "passes/low_precision.h"
#include "absl/strings/str_join.h"
#include "runtime/backend_choice.h"
#include "runtime/session.h"

namespace mixtrain {
inline namespace v1 {

struct InferenceSession::Impl {
  InferenceOptions options;
  std::shared_ptr<const Graph> graph;
  std::unique_ptr<Session> session;
  DeviceType device = DeviceType::kCPU;
  std::string device_note;
};

namespace {

// Lowers `g` to options.compute_type when that is f16/bf16; the inference pipeline where the
// backend runs its fused ops (the CPU). The import (ImportForInference: canonicalization, loops
// unrolled) runs in any case: it rewrites what has no kernel (sequence ops, exporters'
// random-mask dropout, Loop/Scan) into what does, so optimize=false still runs what exporters write.
absl::StatusOr<std::shared_ptr<const Graph>> Prepare(std::unique_ptr<Graph> g, const InferenceOptions& options,
                                                     const Backend& backend) {
  DType compute = api::ToDType(options.compute_type);
  if (compute != DType::kF32) {
    if (!IsLowFloat(compute))
      return absl::InvalidArgumentError(absl::StrCat("InferenceOptions::compute_type must be f32, f16 or bf16, not ",
                                                     ElementTypeName(options.compute_type)));
    MT_RETURN_IF_ERROR(LowerFloatModel(*g, compute));
  }
  const Target target = backend.target();
  if (options.optimize && target.caps.fused_inference) {
    MT_RETURN_IF_ERROR(OptimizeForInference(*g, target));  // canonicalization first
  } else {
    MT_RETURN_IF_ERROR(ImportForInference(*g, target));
  }
  return std::shared_ptr<const Graph>(std::move(g));
}

// The session for `g` on the backend options.device asks for (runtime/backend_choice.h): a GPU
// must have a kernel for every op (checked by op, then by a plan with the dtypes; symbolic dims
// as 1), else "cuda" fails naming them and "auto" falls back to the CPU with a note.
struct Opened {
  InferenceOptions options;
  std::shared_ptr<const Graph> graph;
  std::unique_ptr<Session> session;
  DeviceType device = DeviceType::kCPU;
  std::string device_note;
};

absl::Status Open(std::unique_ptr<Graph> g, Opened& impl) {
  absl::StatusOr<DeviceRequest> request = ParseDeviceFlag(impl.options.device);
  if (!request.ok())
    return absl::InvalidArgumentError(absl::StrCat("InferenceOptions::device: ", request.status().message()));
  MT_ASSIGN_OR_RETURN(
      BackendChoice choice,
      ChooseBackend(*request, "device", "runs", [&](const Backend& b) -> absl::StatusOr<std::string> {
        const bool last = b.type() == DeviceType::kCPU;  // the CPU is the last choice: it may take g
        MT_ASSIGN_OR_RETURN(std::shared_ptr<const Graph> prepared, Prepare(last ? std::move(g) : g->Clone(),
                                                                           impl.options, b));
        if (!last)
          if (std::string missing = MissingOn(b, {{prepared.get(), {}, 1}}); !missing.empty()) return missing;
        MT_ASSIGN_OR_RETURN(std::unique_ptr<Device> device, b.MakeDevice());
        SessionOptions o;
        o.run_on = std::shared_ptr<Device>(std::move(device));
        MT_ASSIGN_OR_RETURN(impl.session, Session::Create(prepared, o));
        impl.graph = std::move(prepared);
        impl.device = b.type();
        return std::string();
      }));
  impl.device_note = choice.note;
  return absl::OkStatus();
}

}  // namespace

InferenceSession::InferenceSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
InferenceSession::~InferenceSession() = default;

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::Create(const std::string& model_path,
                                                                           const InferenceOptions& options) {
  return api::Guarded("InferenceSession::Create", [&]() -> absl::StatusOr<std::unique_ptr<InferenceSession>> {
    MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(model_path));
    Opened o;
    o.options = options;
    MT_RETURN_IF_ERROR(Open(std::move(g), o));
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    impl->graph = std::move(o.graph);
    impl->session = std::move(o.session);
    impl->device = o.device;
    impl->device_note = std::move(o.device_note);
    return std::unique_ptr<InferenceSession>(new InferenceSession(std::move(impl)));
  });
}

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::CreateFromBytes(std::string_view onnx_bytes,
                                                                                    const InferenceOptions& options) {
  return api::Guarded("InferenceSession::CreateFromBytes",
                      [&]() -> absl::StatusOr<std::unique_ptr<InferenceSession>> {
    // No base folder: a model given as bytes must keep its weights inline.
    MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxBytes(std::string(onnx_bytes), ""));
    Opened o;
    o.options = options;
    MT_RETURN_IF_ERROR(Open(std::move(g), o));
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    impl->graph = std::move(o.graph);
    impl->session = std::move(o.session);
    impl->device = o.device;
    impl->device_note = std::move(o.device_note);
    return std::unique_ptr<InferenceSession>(new InferenceSession(std::move(impl)));
  });
}

std::vector<TensorInfo> InferenceSession::Inputs() const { return api::InputInfos(*impl_->graph); }

std::string InferenceSession::DeviceName() const { return mixtrain::DeviceName(impl_->device); }
std::string InferenceSession::DeviceNote() const { return impl_->device_note; }

std::vector<std::string> InferenceSession::OutputNames() const {
  std::vector<std::string> out;
  for (const Value* v : impl_->graph->outputs()) out.push_back(v->name);
  return out;
}

absl::StatusOr<TensorMap> InferenceSession::Run(const TensorMap& feeds, const std::vector<std::string>& fetch) {
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
  const std::optional<PlanStats> st = impl_->session->last_plan_stats();
  if (!st) return std::nullopt;
  return api::ToPlanStatistics(*st);
}

void InferenceSession::SetProfiling(bool on) {
  impl_->session->set_profiling(on);
}

std::vector<OpTypeTime> InferenceSession::Profile() const {
  std::vector<OpTypeTime> out;
  for (const OpProfile& p : impl_->session->Profile())
    out.push_back(OpTypeTime{.op_type = p.op_type, .calls = p.calls, .seconds = p.seconds});
  return out;
}

}  // namespace v1
}  // namespace mixtrain
