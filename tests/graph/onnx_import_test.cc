// ONNX import: fixtures from tests/data/onnxio and models built here in protobuf, covering every
// initializer encoding, external data, opsets, domains, opaque attributes and functions.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "graph/half.h"

namespace mixtrain {
namespace {

const std::string kData = std::string(MT_SOURCE_DIR) + "/tests/data/onnxio/";

// A one-node model: y = Identity(x) with x: f32[2], at the given default-domain opset.
onnx::ModelProto IdentityModel(int64_t opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* n = g->add_node();
  n->set_op_type("Identity");
  n->set_name("id");
  n->add_input("x");
  n->add_output("y");
  for (auto* vi : {g->add_input(), g->add_output()}) {
    vi->set_name(vi == &g->input(0) ? "x" : "y");
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_value(2);
  }
  return m;
}

absl::StatusOr<std::unique_ptr<Graph>> Import(const onnx::ModelProto& m,
                                              const std::string& dir = "") {
  return ImportOnnxBytes(m.SerializeAsString(), dir);
}

TEST(OnnxImport, TinyFixture) {
  auto g = ImportOnnxFile(kData + "tiny.onnx");
  ASSERT_TRUE(g.ok()) << g.status();
  const Graph& G = **g;
  ASSERT_EQ(G.num_nodes(), 8u);
  EXPECT_EQ(G.name, "tiny");
  EXPECT_EQ(G.producer_name, "fixture");
  EXPECT_EQ(G.opset(), 17);
  ASSERT_EQ(G.metadata_props.size(), 1u);
  EXPECT_EQ(G.metadata_props[0].second, "onnxio test");
  // Symbolic batch dim on the input.
  const Value* x = G.FindValue("x");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->dtype, DType::kF32);
  EXPECT_EQ(x->shape.ToString(), "[N,3,8,8]");
  // float_data initializer.
  const Value* b = G.FindValue("conv.b");
  ASSERT_TRUE(b && b->is_initializer());
  EXPECT_FLOAT_EQ(b->initializer->data_as<float>()[2], 0.3f);
  // raw_data initializer.
  EXPECT_EQ(G.FindValue("conv.w")->initializer->dims(), (std::vector<int64_t>{4, 3, 3, 3}));
  // Annotation lines leave the doc_string.
  const Node* relu = G.FindValue("r")->producer;
  ASSERT_NE(relu, nullptr);
  EXPECT_EQ(relu->annotations().at("precision"), "f16");
  EXPECT_TRUE(relu->doc_string.empty());
  // Constant stays a node with a tensor attribute.
  const Node* bias = G.FindValue("fc.b")->producer;
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->op_type(), "Constant");
  ASSERT_EQ(bias->attr("value")->kind, Attribute::Kind::kTensor);
  EXPECT_FLOAT_EQ(bias->attr("value")->t.data_as<float>()[1], -0.5f);
  // Cast attribute.
  EXPECT_EQ(G.FindValue("r16")->producer->attr_int("to", 0), 10);
  // value_info gives the declared type.
  EXPECT_EQ(G.FindValue("c")->dtype, DType::kF32);
  EXPECT_EQ(G.FindValue("c")->shape.ToString(), "[N,4,8,8]");
}

TEST(OnnxImport, ExternalData) {
  auto g = ImportOnnxFile(kData + "external/model.onnx");
  ASSERT_TRUE(g.ok()) << g.status();
  const Value* w = (*g)->FindValue("w");
  ASSERT_TRUE(w && w->is_initializer());
  ASSERT_EQ(w->initializer->numel(), 12);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(w->initializer->data_as<float>()[i], i);
}

// Every typed-field encoding, checked element by element.
TEST(OnnxImport, TypedFieldEncodings) {
  onnx::ModelProto m = IdentityModel();
  auto* g = m.mutable_graph();
  auto add = [&](const char* name, int type) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    t->add_dims(2);
    return t;
  };
  auto* f16 = add("f16", onnx::TensorProto::FLOAT16);
  f16->add_int32_data(FloatToHalf(1.5f));
  f16->add_int32_data(FloatToHalf(-2.0f));
  auto* bf16 = add("bf16", onnx::TensorProto::BFLOAT16);
  bf16->add_int32_data(FloatToBFloat16(3.0f));
  bf16->add_int32_data(FloatToBFloat16(0.25f));
  auto* b = add("b", onnx::TensorProto::BOOL);
  b->add_int32_data(1);
  b->add_int32_data(0);
  auto* i8 = add("i8", onnx::TensorProto::INT8);
  i8->add_int32_data(-7);
  i8->add_int32_data(100);
  auto* u8 = add("u8", onnx::TensorProto::UINT8);
  u8->add_int32_data(255);
  u8->add_int32_data(1);
  auto* i32 = add("i32", onnx::TensorProto::INT32);
  i32->add_int32_data(-123456);
  i32->add_int32_data(7);
  auto* i64 = add("i64", onnx::TensorProto::INT64);
  i64->add_int64_data(int64_t{1} << 40);
  i64->add_int64_data(-1);
  auto* f64 = add("f64", onnx::TensorProto::DOUBLE);
  f64->add_double_data(0.1);
  f64->add_double_data(-1e300);
  auto* raw = add("raw", onnx::TensorProto::FLOAT);
  float rv[2] = {4.0f, -8.0f};
  raw->set_raw_data(rv, sizeof(rv));

  auto r = Import(m);
  ASSERT_TRUE(r.ok()) << r.status();
  auto T = [&](const char* n) -> const Tensor& { return *(*r)->FindValue(n)->initializer; };
  EXPECT_EQ(T("f16").dtype(), DType::kF16);
  EXPECT_EQ(T("f16").GetDouble(0), 1.5);
  EXPECT_EQ(T("f16").GetDouble(1), -2.0);
  EXPECT_EQ(T("bf16").GetDouble(0), 3.0);
  EXPECT_EQ(T("bf16").GetDouble(1), 0.25);
  EXPECT_EQ(T("b").GetInt(0), 1);
  EXPECT_EQ(T("b").GetInt(1), 0);
  EXPECT_EQ(T("i8").GetInt(0), -7);
  EXPECT_EQ(T("i8").GetInt(1), 100);
  EXPECT_EQ(T("u8").GetInt(0), 255);
  EXPECT_EQ(T("i32").GetInt(0), -123456);
  EXPECT_EQ(T("i64").GetInt(0), int64_t{1} << 40);
  EXPECT_EQ(T("i64").GetInt(1), -1);
  EXPECT_EQ(T("f64").GetDouble(0), 0.1);
  EXPECT_EQ(T("f64").GetDouble(1), -1e300);
  EXPECT_EQ(T("raw").GetDouble(1), -8.0);
}

TEST(OnnxImport, DataSizeMismatchNamesInitializer) {
  onnx::ModelProto m = IdentityModel();
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name("short_w");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(3);
  t->set_raw_data(std::string(8, '\0'));
  auto r = Import(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("short_w"), absl::string_view::npos) << r.status();

  t->clear_raw_data();
  t->add_float_data(1.0f);
  r = Import(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("float_data"), absl::string_view::npos) << r.status();
}

TEST(OnnxImport, OpsetRange) {
  for (int64_t v : {6, 9, 11, 13, 17, 18, 21}) EXPECT_TRUE(Import(IdentityModel(v)).ok()) << v;
  for (int64_t v : {1, 5, 22, 99}) {
    auto r = Import(IdentityModel(v));
    ASSERT_FALSE(r.ok()) << v;
    EXPECT_NE(r.status().message().find(absl::StrCat("opset ", v)), absl::string_view::npos)
        << r.status();
  }
}

TEST(OnnxImport, OtherDomainsAreKept) {
  onnx::ModelProto m = IdentityModel();
  auto* op = m.add_opset_import();
  op->set_domain("com.microsoft");
  op->set_version(1);
  auto* n = m.mutable_graph()->mutable_node(0);
  n->set_op_type("FusedThing");
  n->set_domain("com.microsoft");
  auto r = Import(m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->opset("com.microsoft"), 1);
  EXPECT_EQ((*r)->nodes()[0]->domain(), "com.microsoft");
  // A domain with no opset import is an error naming the node.
  m.mutable_opset_import()->RemoveLast();
  r = Import(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'id'"), absl::string_view::npos) << r.status();
}

TEST(OnnxImport, OpaqueAttributesAndFunctionsSurviveExport) {
  onnx::ModelProto m = IdentityModel();
  // A custom-domain op: ONNX's Identity has no such attributes (the verifier would refuse them).
  auto* op = m.add_opset_import();
  op->set_domain("com.example");
  op->set_version(1);
  auto* n = m.mutable_graph()->mutable_node(0);
  n->set_domain("com.example");
  auto* a = n->add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  a->mutable_g()->set_name("sub");
  auto* s = n->add_attribute();
  s->set_name("strs");
  s->set_type(onnx::AttributeProto::STRINGS);
  s->add_strings("a");
  s->add_strings("b");
  auto* f = m.add_functions();
  f->set_name("MyFn");
  f->set_domain("custom");
  auto* ti = m.add_training_info();
  ti->mutable_algorithm()->set_name("algo");
  auto r = Import(m);
  ASSERT_TRUE(r.ok()) << r.status();
  const Node* node = (*r)->nodes()[0].get();
  EXPECT_EQ(node->attr("body")->kind, Attribute::Kind::kOpaque);
  EXPECT_EQ(node->attr("strs")->strings, (std::vector<std::string>{"a", "b"}));
  onnx::ModelProto out = ExportOnnx(**r);
  ASSERT_EQ(out.functions_size(), 1);
  EXPECT_EQ(out.functions(0).name(), "MyFn");
  ASSERT_EQ(out.training_info_size(), 1);
  EXPECT_EQ(out.training_info(0).algorithm().name(), "algo");
  ASSERT_EQ(out.graph().node(0).attribute_size(), 2);
  EXPECT_EQ(out.graph().node(0).attribute(0).g().name(), "sub");
}

TEST(OnnxImport, UnsortedNodesAreSorted) {
  onnx::ModelProto m = IdentityModel();
  auto* g = m.mutable_graph();
  // y = Identity(t); t = Neg(x), listed in the wrong order.
  g->mutable_node(0)->set_input(0, "t");
  auto* neg = g->add_node();
  neg->set_op_type("Neg");
  neg->set_name("neg");
  neg->add_input("x");
  neg->add_output("t");
  auto r = Import(m);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->nodes()[0]->name(), "neg");
  EXPECT_EQ((*r)->nodes()[1]->name(), "id");
}

TEST(OnnxImport, CycleIsAnError) {
  onnx::ModelProto m = IdentityModel();
  auto* g = m.mutable_graph();
  // a = Add(x, b); b = Neg(a); y = Identity(a)
  g->mutable_node(0)->set_input(0, "a");
  auto* add = g->add_node();
  add->set_op_type("Add");
  add->set_name("add");
  add->add_input("x");
  add->add_input("b");
  add->add_output("a");
  auto* neg = g->add_node();
  neg->set_op_type("Neg");
  neg->set_name("neg");
  neg->add_input("a");
  neg->add_output("b");
  auto r = Import(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cycle"), absl::string_view::npos) << r.status();
}

TEST(OnnxImport, SymlinkEscapingFolderIsRefused) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "mt_onnxio_symlink";
  fs::remove_all(dir);
  fs::create_directories(dir / "model");
  {
    std::ofstream(dir / "secret.bin", std::ios::binary) << std::string(8, '\0');
  }
  fs::create_symlink(dir / "secret.bin", dir / "model" / "w.bin");
  onnx::ModelProto m = IdentityModel();
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name("w");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(2);
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* e = t->add_external_data();
  e->set_key("location");
  e->set_value("w.bin");
  auto r = Import(m, (dir / "model").string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("w.bin"), absl::string_view::npos) << r.status();
  EXPECT_NE(r.status().message().find("outside"), absl::string_view::npos) << r.status();
  // A symlink that stays inside the folder is fine.
  fs::rename(dir / "secret.bin", dir / "model" / "real.bin");
  fs::remove(dir / "model" / "w.bin");
  fs::create_symlink(dir / "model" / "real.bin", dir / "model" / "w.bin");
  r = Import(m, (dir / "model").string());
  EXPECT_TRUE(r.ok()) << r.status();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mixtrain
