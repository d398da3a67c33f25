#include "kernels/registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mixtrain {

const char* DeviceName(DeviceType d) { return d == DeviceType::kCPU ? "cpu" : "cuda"; }

absl::Status KernelContext::Error(absl::string_view msg) const {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", node_.name(), "' (", node_.op_type(), "): ", msg));
}

namespace {
class FnOpKernel final : public OpKernel {
 public:
  explicit FnOpKernel(KernelFn fn) : fn_(fn) {}
  absl::Status Compute(KernelContext& ctx) override { return fn_(ctx); }

 private:
  KernelFn fn_;
};
}  // namespace

KernelFactory FnKernel(KernelFn fn) {
  return [fn](const Node&) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
    return std::unique_ptr<OpKernel>(new FnOpKernel(fn));
  };
}

KernelRegistry& KernelRegistry::Global() {
  static KernelRegistry* r = new KernelRegistry();
  return *r;
}

void KernelRegistry::Register(KernelDef def) { defs_.push_back(std::move(def)); }

bool KernelRegistry::Has(std::string_view domain, std::string_view op_type,
                         DeviceType device) const {
  for (const KernelDef& d : defs_)
    if (d.op_type == op_type && d.domain == domain && d.device == device) return true;
  return false;
}

absl::StatusOr<const KernelDef*> KernelRegistry::Find(
    const Node& node, DeviceType device, const std::vector<DType>& input_dtypes,
    const std::vector<DType>& output_dtypes) const {
  std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
  bool op_known = false;
  for (const KernelDef& d : defs_) {
    if (d.op_type != node.op_type() || d.domain != domain || d.device != device) continue;
    op_known = true;
    if (d.dtypes.empty()) return &d;
    DType t = DType::kUndefined;
    if (d.type_input >= 0 && d.type_input < static_cast<int>(input_dtypes.size()))
      t = input_dtypes[d.type_input];
    else if (d.type_input < 0 && !output_dtypes.empty())
      t = output_dtypes[0];
    for (DType ok : d.dtypes)
      if (ok == t) return &d;
  }
  std::vector<std::string> names;
  for (DType t : input_dtypes) names.emplace_back(DTypeName(t));
  return absl::UnimplementedError(absl::StrCat(
      "node '", node.name(), "': no ", DeviceName(device), " kernel for op ",
      domain.empty() ? "" : absl::StrCat(domain, "."), node.op_type(),
      op_known ? absl::StrCat(" with input dtypes (", absl::StrJoin(names, ", "), ")")
               : " (op not supported)"));
}

}  // namespace mixtrain
