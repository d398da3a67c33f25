// ONNX OpSchemas for our ai.mixtrain ops, so onnx::checker accepts the graphs we emit. Each file
// that adds ops registers their schemas next to them:
//   MT_REGISTER_ONNX_SCHEMAS(fused_conv) {
//     AddMixtrainSchema("FusedConv", {{"X", "T", false}, {"W", "T", false}, {"B", "T", true}},
//                       {{"Y", "T", false}});
//   }
// Type constraints available: T and U (float tensors), I (int32/int64). Attributes are not
// checked. RegisterMixtrainSchemas (graph/onnx_export.h) runs every hook once.
#pragma once

#include <initializer_list>

namespace mixtrain {

struct SchemaIo {
  const char* name;
  const char* type;  // "T", "U", "I" or an ONNX type string such as "tensor(int64)"
  bool optional;
};

// Only from inside an MT_REGISTER_ONNX_SCHEMAS body.
void AddMixtrainSchema(const char* op, std::initializer_list<SchemaIo> ins,
                       std::initializer_list<SchemaIo> outs);

using SchemaHook = void (*)();
bool AddMixtrainSchemaHook(SchemaHook hook);

#define MT_REGISTER_ONNX_SCHEMAS(tag)                                              \
  static void MtOnnxSchemas_##tag();                                               \
  static const bool mt_onnx_schemas_registered_##tag =                             \
      ::mixtrain::AddMixtrainSchemaHook(&MtOnnxSchemas_##tag);                     \
  static void MtOnnxSchemas_##tag()

}  // namespace mixtrain
