// ONNX OpSchemas of the ai.mixtrain domain, so onnx::checker accepts graphs that use our own ops
// (gradient ops such as ConvGrad, optimizer updates, loss-scale ops).
#include <mutex>

#include "graph/onnx_export.h"
#include "onnx/defs/schema.h"

namespace mixtrain {

void RegisterMixtrainSchemas() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The checker refuses a domain it has no version range for.
    onnx::OpSchemaRegistry::DomainToVersionRange::Instance().AddDomainToVersion(kMixtrainDomain,
                                                                                 1, 1);
    // One entry per op of our domain, added by the engineers who add the op, e.g.
    //   onnx::RegisterSchema(onnx::OpSchema("ConvGrad", __FILE__, __LINE__)
    //       .SetDomain(kMixtrainDomain).SinceVersion(1)
    //       .Input(0, "dY", "", "T").Input(1, "X", "", "T").Input(2, "W", "", "T")
    //       .Output(0, "dX", "", "T").Output(1, "dW", "", "T")
    //       .TypeConstraint("T", {"tensor(float)", "tensor(float16)", "tensor(bfloat16)"}, ""));
    // The list is empty until the first ai.mixtrain op exists.
  });
}

}  // namespace mixtrain
