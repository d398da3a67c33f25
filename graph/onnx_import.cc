// See onnx_import.h.
#include "graph/onnx_import.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <fstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/unknown_field_set.h"
#include "graph/external_data.h"
#include "graph/onnx_annotations.h"
#include "graph/shape_inference.h"
#include "graph/subgraph.h"
#include "graph/verifier.h"

namespace mixtrain {
namespace {

absl::Status Prefix(const absl::Status& s, const std::string& prefix) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

absl::StatusOr<DType> ElemType(int32_t onnx_type, const std::string& what) {
  absl::StatusOr<DType> dt = FromOnnxType(onnx_type);
  if (!dt.ok())
    return absl::UnimplementedError(absl::StrCat(
        what, " has ONNX element type ", onnx_type, ", which mixtrain does not support"));
  return *dt;
}

// Applies a declared TypeProto (graph input/output, value_info) to a value.
absl::Status ApplyType(const onnx::TypeProto& type, Value* v, const std::string& what) {
  if (type.value_case() == onnx::TypeProto::VALUE_NOT_SET) return absl::OkStatus();
  if (!type.has_tensor_type())
    return absl::UnimplementedError(absl::StrCat(
        what, " is not a tensor (sequence/map/optional/sparse types are not supported)"));
  const auto& tt = type.tensor_type();
  MT_ASSIGN_OR_RETURN(v->dtype, ElemType(tt.elem_type(), what));
  if (!tt.has_shape()) {
    v->shape = Shape();
    return absl::OkStatus();
  }
  std::vector<Dim> dims;
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value()) {
      if (d.dim_value() < 0)
        return absl::InvalidArgumentError(
            absl::StrCat(what, " has negative dimension ", d.dim_value()));
      dims.emplace_back(d.dim_value());
    } else if (d.has_dim_param()) {
      dims.push_back(Dim::Symbol(d.dim_param()));
    } else {
      dims.emplace_back();
    }
  }
  v->shape = Shape(std::move(dims));
  return absl::OkStatus();
}

// Adds the metadata_props of a ValueInfoProto or TensorProto to `out`. Debian's ONNX (1.12) predates
// the field (ONNX 1.16, IR 10), so it is read from the unknown fields by its number when the
// compiled proto does not know it.
void ReadMetadataProps(const google::protobuf::Message& m, int field_number,
                       std::map<std::string, std::string>* out) {
  const google::protobuf::Reflection* r = m.GetReflection();
  if (const auto* f = m.GetDescriptor()->FindFieldByNumber(field_number); f != nullptr) {
    for (int i = 0; i < r->FieldSize(m, f); ++i) {
      const auto& e = static_cast<const onnx::StringStringEntryProto&>(r->GetRepeatedMessage(m, f, i));
      (*out)[e.key()] = e.value();
    }
    return;
  }
  const google::protobuf::UnknownFieldSet& unknown = r->GetUnknownFields(m);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField& u = unknown.field(i);
    if (u.number() != field_number || u.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    onnx::StringStringEntryProto e;
    if (e.ParseFromString(u.length_delimited())) (*out)[e.key()] = e.value();
  }
}
constexpr int kValueInfoMetadataField = 4;
constexpr int kTensorMetadataField = 16;
constexpr int kGraphMetadataField = 16;

// Every declared tensor type (graph inputs and outputs, value_info, used or not) has no negative
// dimension, and a graph input's element type is set: a caller must know what to feed.
absl::Status CheckTypeDeclarations(const onnx::GraphProto& gp) {
  auto check = [](const onnx::ValueInfoProto& vi, const std::string& what) -> absl::Status {
    if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) return absl::OkStatus();
    for (const auto& d : vi.type().tensor_type().shape().dim())
      if (d.has_dim_value() && d.dim_value() < 0)
        return absl::InvalidArgumentError(
            absl::StrCat(what, " '", vi.name(), "' is declared with negative dimension ", d.dim_value()));
    return absl::OkStatus();
  };
  for (const auto& vi : gp.input()) {
    MT_RETURN_IF_ERROR(check(vi, "graph input"));
    if (vi.type().has_tensor_type() && vi.type().tensor_type().elem_type() == onnx::TensorProto::UNDEFINED)
      return absl::InvalidArgumentError(
          absl::StrCat("graph input '", vi.name(), "' is declared with no element type (elem_type 0)"));
  }
  for (const auto& vi : gp.output()) MT_RETURN_IF_ERROR(check(vi, "graph output"));
  for (const auto& vi : gp.value_info()) MT_RETURN_IF_ERROR(check(vi, "value"));
  return absl::OkStatus();
}

absl::StatusOr<Attribute> ImportAttribute(const onnx::AttributeProto& a, const std::string& node) {
  Attribute out;
  out.name = a.name();
  out.doc_string = a.doc_string();
  const std::string what = absl::StrCat("node '", node, "' attribute '", a.name(), "'");
  auto opaque = [&]() {
    out.kind = Attribute::Kind::kOpaque;
    out.doc_string.clear();  // part of the serialized proto
    a.SerializeToString(&out.opaque);
    return out;
  };
  // References to function attributes carry no value of their own.
  if (!a.ref_attr_name().empty()) return opaque();
  switch (a.type()) {
    case onnx::AttributeProto::FLOAT: out.kind = Attribute::Kind::kFloat; out.f = a.f(); break;
    case onnx::AttributeProto::INT: out.kind = Attribute::Kind::kInt; out.i = a.i(); break;
    case onnx::AttributeProto::STRING: out.kind = Attribute::Kind::kString; out.s = a.s(); break;
    case onnx::AttributeProto::FLOATS:
      out.kind = Attribute::Kind::kFloats;
      out.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case onnx::AttributeProto::INTS:
      out.kind = Attribute::Kind::kInts;
      out.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case onnx::AttributeProto::STRINGS:
      out.kind = Attribute::Kind::kStrings;
      out.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case onnx::AttributeProto::TENSOR: {
      // Tensors the IR cannot hold (strings, uint32, ...) stay opaque so export reproduces
      // them exactly. (A tensor attribute's own name and doc_string are dropped.)
      const onnx::TensorProto& tp = a.t();
      absl::StatusOr<DType> dt = FromOnnxType(tp.data_type());
      if (!dt.ok() || *dt == DType::kString || *dt == DType::kUndefined ||
          tp.data_location() == onnx::TensorProto::EXTERNAL)
        return opaque();
      out.kind = Attribute::Kind::kTensor;
      MT_ASSIGN_OR_RETURN(out.t, TensorFromProto(tp, "", what));
      break;
    }
    case onnx::AttributeProto::UNDEFINED:
      return absl::InvalidArgumentError(absl::StrCat(what, " has no type"));
    default:  // GRAPH(S), TENSORS, SPARSE_TENSOR(S), TYPE_PROTO(S)
      return opaque();
  }
  return out;
}

absl::Status ImportOpsets(const onnx::ModelProto& m, Graph& g) {
  for (const auto& op : m.opset_import()) {
    std::string domain = op.domain() == "ai.onnx" ? "" : op.domain();
    if (domain.empty() && (op.version() < kMinOnnxOpset || op.version() > kMaxOnnxOpset))
      return absl::UnimplementedError(absl::StrCat(
          "opset ", op.version(), " of the default ONNX domain is not supported (mixtrain reads ",
          kMinOnnxOpset, " to ", kMaxOnnxOpset, ")"));
    if (!g.opset_imports.emplace(domain, op.version()).second)
      return absl::InvalidArgumentError(
          absl::StrCat("opset of domain '", op.domain(), "' is imported twice"));
  }
  return absl::OkStatus();
}

absl::Status ImportNode(const onnx::NodeProto& np, size_t index, Graph& g) {
  const std::string node_name = np.name().empty() ? absl::StrCat("#", index) : np.name();
  const std::string where = absl::StrCat("node '", node_name, "' (", np.op_type(), ")");
  std::string domain = np.domain();
  if (g.opset_imports.find(domain == "ai.onnx" ? "" : domain) == g.opset_imports.end())
    return absl::InvalidArgumentError(absl::StrCat(
        where, " uses domain '", domain, "', which the model does not import an opset for"));
  std::vector<Value*> ins, outs;
  for (const std::string& name : np.input()) {
    if (name.empty()) {
      ins.push_back(nullptr);
      continue;
    }
    Value* v = g.FindValue(name);
    // A name produced later (unsorted model) or never (the verifier reports it).
    ins.push_back(v ? v : g.AddValue(name));
  }
  absl::flat_hash_set<std::string> seen;
  for (const std::string& name : np.output()) {
    if (name.empty()) {
      outs.push_back(nullptr);
      continue;
    }
    if (!seen.insert(name).second)
      return absl::InvalidArgumentError(
          absl::StrCat(where, " lists output '", name, "' twice"));
    Value* v = g.FindValue(name);
    if (v != nullptr && v->producer != nullptr)
      return absl::InvalidArgumentError(absl::StrCat(
          "duplicate output name '", name, "': ", where, " and node '", v->producer->name(),
          "' both produce it"));
    if (v != nullptr && v->is_initializer())
      return absl::InvalidArgumentError(
          absl::StrCat(where, " output '", name, "' is also an initializer"));
    if (v != nullptr)
      for (const Value* in : g.inputs())
        if (in == v)
          return absl::InvalidArgumentError(
              absl::StrCat(where, " output '", name, "' is also a graph input"));
    outs.push_back(v ? v : g.AddValue(name));
  }
  Node* n = g.AddNode(np.op_type(), ins, outs, np.name(), domain);
  for (const auto& a : np.attribute()) {
    if (n->has_attr(a.name()))
      return absl::InvalidArgumentError(
          absl::StrCat(where, " has attribute '", a.name(), "' twice"));
    MT_ASSIGN_OR_RETURN(Attribute attr, ImportAttribute(a, node_name));
    n->SetAttr(std::move(attr));
  }
  SplitNodeDocString(np.doc_string(), &n->doc_string, &n->annotations());
  return absl::OkStatus();
}

// `release`, when set, is `m` itself, the importer's own copy: each initializer's bytes are freed
// once its tensor is made, so the weights are never held twice (proto and graph) in full.
absl::StatusOr<std::unique_ptr<Graph>> BuildGraph(const onnx::ModelProto& m, const std::string& base_dir,
                                                  onnx::ModelProto* release) {
  auto g = std::make_unique<Graph>();
  g->ir_version = m.ir_version();
  g->producer_name = m.producer_name();
  g->producer_version = m.producer_version();
  g->model_domain = m.domain();
  g->model_version = m.model_version();
  g->model_doc_string = m.doc_string();
  for (const auto& kv : m.metadata_props()) g->metadata_props.emplace_back(kv.key(), kv.value());
  MT_RETURN_IF_ERROR(ImportOpsets(m, *g));
  for (const auto& f : m.functions()) g->opaque_functions.push_back(f.SerializeAsString());
  for (const auto& t : m.training_info()) g->opaque_functions.push_back(t.SerializeAsString());

  const onnx::GraphProto& gp = m.graph();
  MT_RETURN_IF_ERROR(CheckTypeDeclarations(gp));
  g->name = gp.name();
  g->doc_string = gp.doc_string();
  ReadMetadataProps(gp, kGraphMetadataField, &g->graph_metadata);
  if (gp.sparse_initializer_size() > 0)
    return absl::UnimplementedError(absl::StrCat("sparse initializer '",
                                                 gp.sparse_initializer(0).values().name(),
                                                 "' is not supported"));
  for (int i = 0; i < gp.initializer_size(); ++i) {
    const onnx::TensorProto& tp = gp.initializer(i);
    const std::string what = absl::StrCat("initializer '", tp.name(), "'");
    if (tp.name().empty()) return absl::InvalidArgumentError("an initializer has no name");
    if (g->FindValue(tp.name()))
      return absl::InvalidArgumentError(absl::StrCat(what, " is defined twice"));
    MT_ASSIGN_OR_RETURN(Tensor t, TensorFromProto(tp, base_dir, what));
    if (release != nullptr) std::string().swap(*release->mutable_graph()->mutable_initializer(i)->mutable_raw_data());
    Value* v = g->AddInitializer(tp.name(), std::move(t));
    v->doc_string = tp.doc_string();
    ReadMetadataProps(tp, kTensorMetadataField, &v->metadata);
  }
  absl::flat_hash_set<std::string> input_names;
  for (const auto& vi : gp.input()) {
    const std::string what = absl::StrCat("graph input '", vi.name(), "'");
    if (vi.name().empty()) return absl::InvalidArgumentError("a graph input has no name");
    if (!input_names.insert(vi.name()).second)
      return absl::InvalidArgumentError(absl::StrCat(what, " is listed twice"));
    Value* v = g->FindValue(vi.name());
    if (v == nullptr) {
      v = g->AddValue(vi.name());
      MT_RETURN_IF_ERROR(ApplyType(vi.type(), v, what));
    }
    ReadMetadataProps(vi, kValueInfoMetadataField, &v->metadata);
    // An input that is also an initializer (older IR versions) keeps the initializer's type.
    if (v->doc_string.empty()) v->doc_string = vi.doc_string();
    g->AddInput(v);
  }
  for (int i = 0; i < gp.node_size(); ++i) MT_RETURN_IF_ERROR(ImportNode(gp.node(i), i, *g));
  for (const auto& vi : gp.output()) {
    const std::string what = absl::StrCat("graph output '", vi.name(), "'");
    if (vi.name().empty()) return absl::InvalidArgumentError("a graph output has no name");
    Value* v = g->FindValue(vi.name());
    if (v == nullptr) v = g->AddValue(vi.name());
    if (!v->is_initializer()) MT_RETURN_IF_ERROR(ApplyType(vi.type(), v, what));
    if (v->doc_string.empty()) v->doc_string = vi.doc_string();
    g->AddOutput(v);
  }
  for (const auto& vi : gp.value_info()) {
    // value_info of names the graph does not use carries nothing we need.
    Value* v = g->FindValue(vi.name());
    if (v == nullptr) continue;
    ReadMetadataProps(vi, kValueInfoMetadataField, &v->metadata);
    if (v->is_initializer()) continue;
    MT_RETURN_IF_ERROR(ApplyType(vi.type(), v, absl::StrCat("value '", vi.name(), "'")));
    if (v->doc_string.empty()) v->doc_string = vi.doc_string();
  }
  return g;
}

// What the model declared (value_info, graph outputs) for a value a node computes.
struct Declared {
  const Value* value;
  DType dtype;
  Shape shape;
};

std::vector<Declared> DeclaredTypes(const Graph& g) {
  std::vector<Declared> out;
  for (const Value* v : g.values())
    if (v->producer != nullptr && (v->dtype != DType::kUndefined || v->shape.rank_known))
      out.push_back({v, v->dtype, v->shape});
  return out;
}

// After shape inference: what a node computes (its dtype, rank, known dims) may not contradict
// what the model declared for it; inference keeps the declaration only where it knows less.
absl::Status CheckDeclaredTypes(const std::vector<Declared>& declared) {
  for (const Declared& d : declared) {
    const Value& v = *d.value;
    const std::string what = absl::StrCat("node '", v.producer->name(), "' (", v.producer->op_type(),
                                          ") output '", v.name, "'");
    if (d.dtype != DType::kUndefined && v.dtype != d.dtype)
      return absl::InvalidArgumentError(absl::StrCat(what, " is declared ", DTypeName(d.dtype),
                                                     " but the node computes ", DTypeName(v.dtype)));
    if (!d.shape.rank_known || !v.shape.rank_known) continue;
    bool conflict = d.shape.rank() != v.shape.rank();
    for (size_t i = 0; !conflict && i < d.shape.dims.size(); ++i)
      conflict = d.shape.dims[i].known() && v.shape.dims[i].known() &&
                 d.shape.dims[i].value != v.shape.dims[i].value;
    if (conflict)
      return absl::InvalidArgumentError(absl::StrCat(what, " is declared ", d.shape.ToString(),
                                                     " but the node computes ", v.shape.ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// `size` bytes of a serialized ModelProto from `raw`, with the 2 GiB limit (protobuf's default
// is 64 MiB in some versions).
absl::Status ParseModelStream(google::protobuf::io::ZeroCopyInputStream* raw, int64_t size,
                              onnx::ModelProto* model) {
  if (size == 0) return absl::InvalidArgumentError("the file is empty");
  if (size > INT_MAX)
    return absl::InvalidArgumentError(absl::StrCat(
        "the file has ", size, " bytes; ONNX files above 2 GiB must keep their weights in external data"));
  google::protobuf::io::CodedInputStream in(raw);
  in.SetTotalBytesLimit(INT_MAX);
  if (!model->ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    return absl::InvalidArgumentError("not a valid ONNX model (protobuf parse failed: truncated or corrupt)");
  if (!model->has_graph())
    return absl::InvalidArgumentError("not a valid ONNX model (no graph)");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Graph>> ImportModel(const onnx::ModelProto& model, const std::string& base_dir,
                                                   onnx::ModelProto* release) {
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, BuildGraph(model, base_dir, release));
  // Every check a pass, shape rule or kernel relies on, before any of them sees the graph.
  MT_RETURN_IF_ERROR(VerifyAcyclic(*g));
  MT_RETURN_IF_ERROR(g->TopoSort());
  MT_RETURN_IF_ERROR(Verify(*g));
  MT_RETURN_IF_ERROR(VerifySchemas(*g));
  const std::vector<Declared> declared = DeclaredTypes(*g);
  MT_RETURN_IF_ERROR(InferShapes(*g));
  MT_RETURN_IF_ERROR(CheckDeclaredTypes(declared));
  MT_RETURN_IF_ERROR(VerifyTypesAndSizes(*g));
  // After inference, so the inputs it adds to loops know their types (graph/subgraph.h).
  MT_RETURN_IF_ERROR(MakeOuterReadsExplicit(*g).status());
  return g;
}

}  // namespace

absl::Status ParseModelProto(const std::string& bytes, onnx::ModelProto* model) {
  if (bytes.size() > static_cast<size_t>(INT_MAX)) return ParseModelStream(nullptr, static_cast<int64_t>(bytes.size()), model);
  google::protobuf::io::ArrayInputStream raw(bytes.data(), static_cast<int>(bytes.size()));
  return ParseModelStream(&raw, static_cast<int64_t>(bytes.size()), model);
}

absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxModel(const onnx::ModelProto& model,
                                                       const std::string& base_dir) {
  return ImportModel(model, base_dir, nullptr);
}

absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxBytes(const std::string& bytes,
                                                       const std::string& base_dir) {
  onnx::ModelProto model;
  MT_RETURN_IF_ERROR(ParseModelProto(bytes, &model));
  return ImportModel(model, base_dir, &model);
}

absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxFile(const std::string& path) {
  const std::string prefix = absl::StrCat(path, ": ");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return absl::InvalidArgumentError(absl::StrCat(prefix, "is a folder, not an ONNX file"));
  // A FIFO or device would block or never end: only regular files (symlinks to them) are read.
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    return absl::InvalidArgumentError(absl::StrCat(prefix, "is not a regular file"));
  // Parsed straight from the file (no copy of its bytes in memory), then each initializer's bytes
  // freed as it becomes a tensor: the weights are held once, plus one tensor's worth.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(prefix, "cannot open the file"));
  struct stat st;
  // Refuse before reading: protobuf cannot parse a message above 2 GiB.
  onnx::ModelProto model;
  absl::Status parsed;
  if (fstat(fd, &st) != 0) {
    parsed = absl::DataLossError("reading the file failed");
  } else {
    google::protobuf::io::FileInputStream raw(fd);
    parsed = ParseModelStream(&raw, st.st_size, &model);
    if (!parsed.ok() && raw.GetErrno() != 0) parsed = absl::DataLossError("reading the file failed");
  }
  close(fd);
  if (!parsed.ok()) return Prefix(parsed, prefix);
  std::string base_dir = std::filesystem::path(path).parent_path().string();
  if (base_dir.empty()) base_dir = ".";
  absl::StatusOr<std::unique_ptr<Graph>> g = ImportModel(model, base_dir, &model);
  if (!g.ok()) return Prefix(g.status(), prefix);
  return g;
}

}  // namespace mixtrain
