// See onnx_export.h.
#include "graph/onnx_export.h"

#include <cstdio>
#include <exception>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/unknown_field_set.h"
#include "graph/atomic_file.h"
#include "graph/external_data.h"
#include "graph/onnx_annotations.h"
#include "onnx/checker.h"
#include "onnx/shape_inference/implementation.h"

namespace mixtrain {
namespace {

void ExportType(const Value& v, onnx::TypeProto* type) {
  auto* tt = type->mutable_tensor_type();
  tt->set_elem_type(ToOnnxType(v.dtype));
  if (!v.shape.rank_known) return;
  auto* shape = tt->mutable_shape();
  for (const Dim& d : v.shape.dims) {
    auto* dim = shape->add_dim();
    if (d.known()) {
      dim->set_dim_value(d.value);
    } else if (!d.symbol.empty()) {
      dim->set_dim_param(d.symbol);
    }
  }
}

void ExportValueInfo(const Value& v, onnx::ValueInfoProto* vi) {
  vi->set_name(v.name);
  if (v.dtype != DType::kUndefined) ExportType(v, vi->mutable_type());
  if (!v.doc_string.empty()) vi->set_doc_string(v.doc_string);
}

void ExportAttribute(const Attribute& a, onnx::AttributeProto* p) {
  if (a.kind == Attribute::Kind::kOpaque) {
    MT_CHECK(p->ParseFromString(a.opaque)) << "opaque attribute '" << a.name << "' is corrupt";
    return;
  }
  p->set_name(a.name);
  if (!a.doc_string.empty()) p->set_doc_string(a.doc_string);
  switch (a.kind) {
    case Attribute::Kind::kFloat:
      p->set_type(onnx::AttributeProto::FLOAT);
      p->set_f(a.f);
      break;
    case Attribute::Kind::kInt:
      p->set_type(onnx::AttributeProto::INT);
      p->set_i(a.i);
      break;
    case Attribute::Kind::kString:
      p->set_type(onnx::AttributeProto::STRING);
      p->set_s(a.s);
      break;
    case Attribute::Kind::kTensor:
      p->set_type(onnx::AttributeProto::TENSOR);
      TensorToProto(a.t, p->mutable_t());
      break;
    case Attribute::Kind::kFloats:
      p->set_type(onnx::AttributeProto::FLOATS);
      for (float f : a.floats) p->add_floats(f);
      break;
    case Attribute::Kind::kInts:
      p->set_type(onnx::AttributeProto::INTS);
      for (int64_t i : a.ints) p->add_ints(i);
      break;
    case Attribute::Kind::kStrings:
      p->set_type(onnx::AttributeProto::STRINGS);
      for (const std::string& s : a.strings) p->add_strings(s);
      break;
    case Attribute::Kind::kOpaque:
      break;
  }
}

// Graph::opaque_functions mixes FunctionProtos and TrainingInfoProtos. FunctionProto reserves
// field 2, which TrainingInfoProto uses for its required `algorithm`: that tells them apart.
bool IsTrainingInfo(const std::string& bytes) {
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromString(bytes)) return false;
  for (int i = 0; i < fields.field_count(); ++i)
    if (fields.field(i).number() == 2) return true;
  return false;
}

void ExportNode(const Node& n, onnx::NodeProto* p) {
  for (const Value* in : n.inputs()) p->add_input(in ? in->name : "");
  for (const Value* out : n.outputs()) p->add_output(out ? out->name : "");
  p->set_name(n.name());
  p->set_op_type(n.op_type());
  if (!n.domain().empty()) p->set_domain(n.domain());
  for (const Attribute& a : n.attributes()) ExportAttribute(a, p->add_attribute());
  std::string doc = JoinNodeDocString(n.doc_string, n.annotations());
  if (!doc.empty()) p->set_doc_string(doc);
}

}  // namespace

onnx::ModelProto ExportOnnx(const Graph& g) {
  onnx::ModelProto m;
  m.set_ir_version(g.ir_version);
  for (const auto& [domain, version] : g.opset_imports) {
    auto* op = m.add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
  }
  if (!g.producer_name.empty()) m.set_producer_name(g.producer_name);
  if (!g.producer_version.empty()) m.set_producer_version(g.producer_version);
  if (!g.model_domain.empty()) m.set_domain(g.model_domain);
  if (g.model_version != 0) m.set_model_version(g.model_version);
  if (!g.model_doc_string.empty()) m.set_doc_string(g.model_doc_string);
  for (const auto& [k, v] : g.metadata_props) {
    auto* e = m.add_metadata_props();
    e->set_key(k);
    e->set_value(v);
  }
  for (const std::string& f : g.opaque_functions) {
    bool ok = IsTrainingInfo(f) ? m.add_training_info()->ParseFromString(f)
                                : m.add_functions()->ParseFromString(f);
    MT_CHECK(ok) << "Graph::opaque_functions holds a corrupt entry";
  }

  onnx::GraphProto* gp = m.mutable_graph();
  for (const auto& n : g.nodes()) ExportNode(*n, gp->add_node());
  // The checker requires a graph name; graphs built in code may have none.
  gp->set_name(g.name.empty() ? std::string("mixtrain") : g.name);
  for (const Value* v : g.initializers()) {
    onnx::TensorProto* t = gp->add_initializer();
    TensorToProto(*v->initializer, t);
    t->set_name(v->name);
    if (!v->doc_string.empty()) t->set_doc_string(v->doc_string);
  }
  if (!g.doc_string.empty()) gp->set_doc_string(g.doc_string);
  for (const Value* v : g.inputs()) ExportValueInfo(*v, gp->add_input());
  for (const Value* v : g.outputs()) ExportValueInfo(*v, gp->add_output());
  // Types of intermediate values, so viewers and re-import see what inference found.
  for (const auto& n : g.nodes())
    for (const Value* v : n->outputs())
      if (v && v->dtype != DType::kUndefined && !g.IsGraphOutput(v))
        ExportValueInfo(*v, gp->add_value_info());
  return m;
}

std::string SerializeDeterministic(const onnx::ModelProto& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream sos(&out);
    google::protobuf::io::CodedOutputStream cos(&sos);
    cos.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&cos);
  }
  return out;
}

absl::Status SaveOnnxFile(const Graph& g, const std::string& path,
                          const OnnxSaveOptions& options) {
  onnx::ModelProto m = ExportOnnx(g);
  int64_t total = 0;
  for (const auto& t : m.graph().initializer()) total += t.raw_data().size();
  std::string data_path, data;
  if (total > options.external_data_threshold) {
    // Move the large tensors out, in initializer order, each at its byte offset.
    const std::string location = std::filesystem::path(path).filename().string() + ".data";
    data_path = (std::filesystem::path(path).parent_path() / location).string();
    for (auto& t : *m.mutable_graph()->mutable_initializer()) {
      if (static_cast<int64_t>(t.raw_data().size()) < options.external_min_bytes) continue;
      auto add = [&](const char* k, const std::string& v) {
        auto* e = t.add_external_data();
        e->set_key(k);
        e->set_value(v);
      };
      add("location", location);
      add("offset", absl::StrCat(data.size()));
      add("length", absl::StrCat(t.raw_data().size()));
      data += t.raw_data();
      t.clear_raw_data();
      t.set_data_location(onnx::TensorProto::EXTERNAL);
    }
  }
  std::string bytes = SerializeDeterministic(m);
  if (bytes.size() > static_cast<size_t>(INT32_MAX))
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "': the model is ", bytes.size(),
        " bytes even with external data; lower external_data_threshold"));
  if (!data_path.empty()) MT_RETURN_IF_ERROR(WriteFileAtomically(data_path, data));
  absl::Status s = WriteFileAtomically(path, bytes);
  if (!s.ok() && !data_path.empty()) std::remove(data_path.c_str());
  return s;
}

absl::Status CheckOnnxModel(const onnx::ModelProto& m) {
  RegisterMixtrainSchemas();
  try {
    onnx::checker::check_model(m);
    onnx::ModelProto copy = m;
    onnx::ShapeInferenceOptions opts(/*check_type=*/true, /*strict_mode=*/1);
    onnx::shape_inference::InferShapes(copy, onnx::OpSchemaRegistry::Instance(), opts);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("ONNX checker: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace mixtrain
