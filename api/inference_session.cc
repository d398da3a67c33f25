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
#include "runtime/cuda/device_select.h"
#include "runtime/planner.h"
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

// Lowers `g` to options.compute_type when that is f16/bf16; the inference passes on the CPU.
// The import (ImportForInference: canonicalization, loops unrolled) runs in any case: it rewrites
// what has no kernel (sequence ops, exporters' random-mask dropout, Loop/Scan) into what does, so
// optimize=false still runs what exporters write.
absl::StatusOr<std::shared_ptr<const Graph>> Prepare(std::unique_ptr<Graph> g, const InferenceOptions& options,
                                                     DeviceType device) {
  DType compute = api::ToDType(options.compute_type);
  if (compute != DType::kF32) {
    if (!IsLowFloat(compute))
      return absl::InvalidArgumentError(absl::StrCat("InferenceOptions::compute_type must be f32, f16 or bf16, not ",
                                                     ElementTypeName(options.compute_type)));
    MT_RETURN_IF_ERROR(LowerFloatModel(*g, compute));
  }
  if (options.optimize && device == DeviceType::kCPU) {
    MT_RETURN_IF_ERROR(OptimizeForInference(*g));  // canonicalization first
  } else {
    MT_RETURN_IF_ERROR(ImportForInference(*g));
  }
  return std::shared_ptr<const Graph>(std::move(g));
}

// The session for `g` on the device options.device asks for: a GPU must have a kernel for every
// op (checked by op, then by a plan with the dtypes; symbolic dims as 1), else "cuda" fails naming
// them and "auto" falls back to the CPU with a note.
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
  MT_ASSIGN_OR_RETURN(DeviceSelection where, SelectDevice(*request));
  impl.device_note = where.note;
  if (where.type == DeviceType::kCUDA) {
    std::unique_ptr<Graph> copy = g->Clone();
    MT_ASSIGN_OR_RETURN(std::shared_ptr<const Graph> prepared, Prepare(std::move(copy), impl.options, DeviceType::kCUDA));
    std::string missing;
    if (std::vector<std::string> ops = OpsWithoutKernels(*prepared, DeviceType::kCUDA); !ops.empty()) {
      missing = absl::StrJoin(ops, ", ");
    } else if (absl::Status st = DryPlan(*prepared, DeviceType::kCUDA, {}, 1); absl::IsUnimplemented(st)) {
      missing = std::string(st.message());
    }
    if (missing.empty()) {
      MT_ASSIGN_OR_RETURN(std::unique_ptr<Device> gpu, MakeDevice(DeviceType::kCUDA));
      SessionOptions o;
      o.run_on = std::shared_ptr<Device>(std::move(gpu));
      MT_ASSIGN_OR_RETURN(impl.session, Session::Create(prepared, o));
      impl.graph = std::move(prepared);
      impl.device = DeviceType::kCUDA;
      return absl::OkStatus();
    }
    if (*request == DeviceRequest::kCuda)
      return absl::UnimplementedError(absl::StrCat("device cuda: no CUDA kernel for ", missing,
                                                   " (nothing ran; device cpu runs it)"));
    impl.device_note = absl::StrCat("device auto: the GPU has no kernel for ", missing, "; running on the CPU");
  }
  MT_ASSIGN_OR_RETURN(impl.graph, Prepare(std::move(g), impl.options, DeviceType::kCPU));
  MT_ASSIGN_OR_RETURN(impl.session, Session::Create(impl.graph));
  impl.device = DeviceType::kCPU;
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
