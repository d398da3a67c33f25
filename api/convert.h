// The public API's boundary (api/ implements include/mixtrain/): conversions between the public
// types (HostTensor, ElementType, TrainConfig) and the internal ones (Tensor, DType,
// pb::TrainConfig), and the guard that keeps C++ exceptions from crossing the API.
#pragma once

#include <exception>
#include <map>
#include <new>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "graph/check.h"
#include "graph/dtype.h"
#include "graph/graph.h"
#include "graph/tensor.h"
#include "mixtrain/tensor.h"
#include "mixtrain/train_config.h"
#include "mixtrain/inference_session.h"
#include "mixtrain/memory_statistics.h"
#include "proto/mixtrain_pb.h"
#include "runtime/memory_report.h"
#include "runtime/plan.h"

namespace mixtrain::api {

DType ToDType(ElementType type);
absl::StatusOr<ElementType> ToElementType(DType dtype);  // fails for string/undefined

Tensor ToTensor(const HostTensor& t);  // copies the bytes
absl::StatusOr<HostTensor> ToHostTensor(const Tensor& t);
std::map<std::string, Tensor> ToTensors(const TensorMap& m);
// A value, and the graph's non-initializer inputs, as the public API describes them.
TensorInfo InfoOf(const Value& v);
std::vector<TensorInfo> InputInfos(const Graph& g);

pb::TrainConfig ToProto(const TrainConfig& c);
TrainConfig FromProto(const pb::TrainConfig& p);

MemoryStatistics ToMemoryStatistics(const MemoryReport& r);
PlanStatistics ToPlanStatistics(const PlanStats& s);

// Runs `f` (returning absl::Status or StatusOr) and turns an escaping exception (ONNX's checker
// and shape inference throw, allocation may) into an error Status naming `what`.
template <typename F>
auto Guarded(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of memory"));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(what, ": unknown exception"));
  }
}

}  // namespace mixtrain::api
