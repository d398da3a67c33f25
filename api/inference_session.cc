// mixtrain::v1::InferenceSession: a locked pimpl over the runtime's Session (runtime/session.h)
// for an imported ONNX model.
#include <mutex>

#include "api/convert.h"
#include "graph/onnx_import.h"
#include "mixtrain/inference_session.h"
#include "runtime/session.h"

namespace mixtrain {
inline namespace v1 {

struct InferenceSession::Impl {
  std::mutex mu;
  std::shared_ptr<const Graph> graph;
  std::unique_ptr<Session> session;
};

InferenceSession::InferenceSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
InferenceSession::~InferenceSession() = default;

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::Create(const std::string& model_path) {
  return api::Guarded("InferenceSession::Create", [&]() -> absl::StatusOr<std::unique_ptr<InferenceSession>> {
    auto impl = std::make_unique<Impl>();
    MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(model_path));
    impl->graph = std::move(g);
    MT_ASSIGN_OR_RETURN(impl->session, Session::Create(impl->graph));
    return std::unique_ptr<InferenceSession>(new InferenceSession(std::move(impl)));
  });
}

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::CreateFromBytes(std::string_view onnx_bytes) {
  return api::Guarded("InferenceSession::CreateFromBytes",
                      [&]() -> absl::StatusOr<std::unique_ptr<InferenceSession>> {
    auto impl = std::make_unique<Impl>();
    // No base folder: a model given as bytes must keep its weights inline.
    MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxBytes(std::string(onnx_bytes), ""));
    impl->graph = std::move(g);
    MT_ASSIGN_OR_RETURN(impl->session, Session::Create(impl->graph));
    return std::unique_ptr<InferenceSession>(new InferenceSession(std::move(impl)));
  });
}

std::vector<TensorInfo> InferenceSession::Inputs() const {
  std::vector<TensorInfo> out;
  for (const Value* v : impl_->graph->inputs()) {
    if (v->is_initializer()) continue;
    TensorInfo info;
    info.name = v->name;
    info.type = api::ToElementType(v->dtype).value_or(ElementType::kFloat32);
    for (const Dim& d : v->shape.dims) info.shape.push_back(d.known() ? d.value : -1);
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<std::string> InferenceSession::OutputNames() const {
  std::vector<std::string> out;
  for (const Value* v : impl_->graph->outputs()) out.push_back(v->name);
  return out;
}

absl::StatusOr<TensorMap> InferenceSession::Run(const TensorMap& feeds, const std::vector<std::string>& fetch) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return api::Guarded("InferenceSession::Run", [&]() -> absl::StatusOr<TensorMap> {
    std::vector<std::string> names = fetch.empty() ? OutputNames() : fetch;
    MT_ASSIGN_OR_RETURN(std::vector<Tensor> outs, impl_->session->Run(api::ToTensors(feeds), names));
    if (outs.size() != names.size())
      return absl::InternalError(absl::StrCat("InferenceSession::Run: ", outs.size(), " outputs for ",
                                              names.size(), " fetches"));
    TensorMap result;
    for (size_t i = 0; i < names.size(); ++i) {
      MT_ASSIGN_OR_RETURN(HostTensor t, api::ToHostTensor(outs[i]));
      result.emplace(names[i], std::move(t));
    }
    return result;
  });
}

}  // namespace v1
}  // namespace mixtrain
