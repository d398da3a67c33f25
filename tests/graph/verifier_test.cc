// The import-time verifier (graph/verifier.h): one test per class of invalid model, each asserting
// the error names the culprit node (or initializer / input), and every model we ship or test with
// (models/, tests/data/zoo, tests/data/grad) still imports.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <filesystem>
#include <fstream>

#include "graph/onnx_import.h"
#include "graph/verifier.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;

// A model under construction: graph inputs, initializers, nodes, outputs.
class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 17) {
    m_.set_ir_version(8);
    m_.add_opset_import()->set_version(opset);
    m_.mutable_graph()->set_name("g");
  }
  ModelBuilder& Input(const std::string& name, int32_t elem, std::vector<int64_t> dims) {
    SetType(m_.mutable_graph()->add_input(), name, elem, dims);
    return *this;
  }
  ModelBuilder& Output(const std::string& name, int32_t elem = 0, std::vector<int64_t> dims = {}) {
    SetType(m_.mutable_graph()->add_output(), name, elem, dims);
    return *this;
  }
  ModelBuilder& ValueInfo(const std::string& name, int32_t elem, std::vector<int64_t> dims) {
    SetType(m_.mutable_graph()->add_value_info(), name, elem, dims);
    return *this;
  }
  onnx::TensorProto* Initializer(const std::string& name, std::vector<int64_t> dims,
                                 std::vector<float> data) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(data.data(), data.size() * sizeof(float));
    return t;
  }
  onnx::TensorProto* InitializerI64(const std::string& name, std::vector<int64_t> values) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
    return t;
  }
  onnx::NodeProto* Node(const std::string& op, std::vector<std::string> ins,
                        std::vector<std::string> outs, const std::string& name) {
    auto* n = m_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return n;
  }
  const onnx::ModelProto& model() const { return m_; }

 private:
  static void SetType(onnx::ValueInfoProto* vi, const std::string& name, int32_t elem,
                      const std::vector<int64_t>& dims) {
    vi->set_name(name);
    if (elem == 0) return;
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  }
  onnx::ModelProto m_;
};

void AddIntAttr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void AddFloatAttr(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

constexpr int32_t kF32 = onnx::TensorProto::FLOAT;
constexpr int32_t kI64 = onnx::TensorProto::INT64;

// Imports and expects an error whose message contains every needle.
void ExpectError(const onnx::ModelProto& m, std::initializer_list<std::string> needles) {
  auto g = ImportOnnxBytes(m.SerializeAsString(), "");
  ASSERT_FALSE(g.ok()) << "imported, expected an error";
  const std::string msg(g.status().message());
  for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
}

// x: f32[2,3] -> Relu -> Neg -> y.
ModelBuilder Chain() {
  ModelBuilder b;
  b.Input("x", kF32, {2, 3}).Output("y");
  b.Node("Relu", {"x"}, {"r"}, "relu");
  b.Node("Neg", {"r"}, {"y"}, "neg");
  return b;
}

TEST(Verifier, ChainImports) {
  auto g = ImportOnnxBytes(Chain().model().SerializeAsString(), "");
  ASSERT_TRUE(g.ok()) << g.status();
}

TEST(Verifier, DanglingInputNamesNode) {
  ModelBuilder b = Chain();
  b.Node("Add", {"r", "nowhere"}, {"z"}, "adder");
  ExpectError(b.model(), {"node 'adder' (Add)", "'nowhere'", "not produced"});
}

TEST(Verifier, DuplicateValueNames) {
  ModelBuilder b = Chain();
  b.Initializer("w", {1}, {1.f});
  b.Node("Relu", {"x"}, {"w"}, "shadow");  // an output named like an initializer
  ExpectError(b.model(), {"node 'shadow' (Relu)", "'w'", "initializer"});
}

TEST(Verifier, DuplicateNodeOutputs) {
  ModelBuilder b = Chain();
  b.Node("Abs", {"x"}, {"r"}, "again");
  ExpectError(b.model(), {"duplicate output name 'r'", "'again'", "'relu'"});
}

TEST(Verifier, CycleNamesNodesOnIt) {
  // relu -> neg -> add -> relu is a cycle; 'after' only consumes it and must not be the one named.
  ModelBuilder b;
  b.Input("x", kF32, {2}).Output("z");
  b.Node("Relu", {"s"}, {"r"}, "relu");
  b.Node("Neg", {"r"}, {"n"}, "neg");
  b.Node("Add", {"n", "x"}, {"s"}, "add");
  b.Node("Abs", {"s"}, {"z"}, "after");
  ExpectError(b.model(), {"cycle", "'relu' (Relu)", "'neg' (Neg)", "'add' (Add)"});
  auto g = ImportOnnxBytes(b.model().SerializeAsString(), "");
  EXPECT_EQ(std::string(g.status().message()).find("after"), std::string::npos) << g.status();
}

TEST(Verifier, SelfLoop) {
  ModelBuilder b;
  b.Input("x", kF32, {2}).Output("s");
  b.Node("Add", {"x", "s"}, {"s"}, "loop");
  ExpectError(b.model(), {"cycle", "'loop' (Add)"});
}

TEST(Verifier, UnsortedAcyclicModelImports) {
  ModelBuilder b;
  b.Input("x", kF32, {2}).Output("y");
  b.Node("Neg", {"r"}, {"y"}, "neg");  // listed before its producer: legal ONNX
  b.Node("Relu", {"x"}, {"r"}, "relu");
  auto g = ImportOnnxBytes(b.model().SerializeAsString(), "");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->nodes()[0]->name(), "relu");
}

TEST(Verifier, TooManyInputs) {
  ModelBuilder b;
  b.Input("x", kF32, {2}).Output("y");
  b.Node("Relu", {"x", "x"}, {"y"}, "relu2");
  ExpectError(b.model(), {"node 'relu2' (Relu)", "2 inputs", "Relu-14", "takes 1"});
}

TEST(Verifier, TooFewInputs) {
  ModelBuilder b;
  b.Input("x", kF32, {2}).Output("y");
  b.Node("Add", {"x"}, {"y"}, "half_add");
  ExpectError(b.model(), {"node 'half_add' (Add)", "1 inputs", "takes 2"});
}

TEST(Verifier, TooManyOutputs) {
  ModelBuilder b;
  b.Input("x", kF32, {2}).Output("y");
  b.Node("Relu", {"x"}, {"y", "extra"}, "relu_two");
  ExpectError(b.model(), {"node 'relu_two' (Relu)", "2 outputs", "makes 1"});
}

// The crashes: "" as the data input of Transpose (autodiff), Dropout (train mode) and
// Size (folded by the planner).
TEST(Verifier, RequiredInputGivenAsEmpty) {
  for (const std::string op : {"Transpose", "Dropout", "Size"}) {
    SCOPED_TRACE(op);
    ModelBuilder b;
    b.Input("x", kF32, {2, 3}).Output("y");
    b.Node(op, {""}, {"y"}, "bad_" + op);
    ExpectError(b.model(), {"node 'bad_" + op + "' (" + op + ")", "input 0", "required", "\"\""});
  }
}

TEST(Verifier, OptionalInputMayBeEmpty) {
  ModelBuilder b;
  b.Input("x", kF32, {2, 3}).Output("y");
  b.Node("Clip", {"x", "", ""}, {"y"}, "clip");
  auto g = ImportOnnxBytes(b.model().SerializeAsString(), "");
  EXPECT_TRUE(g.ok()) << g.status();
}

TEST(Verifier, AttributeOfWrongType) {
  ModelBuilder b;
  b.Input("x", kF32, {2, 3}).Output("y");
  auto* n = b.Node("Softmax", {"x"}, {"y"}, "sm");
  auto* a = n->add_attribute();
  a->set_name("axis");
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(1.5f);
  ExpectError(b.model(), {"node 'sm' (Softmax)", "attribute 'axis'", "FLOAT", "INT"});
}

TEST(Verifier, RequiredAttributeMissing) {
  ModelBuilder b;
  b.Input("x", kF32, {2}).Output("y");
  b.Node("Cast", {"x"}, {"y"}, "cast");
  ExpectError(b.model(), {"node 'cast' (Cast)", "lacks attribute 'to'"});
}

TEST(Verifier, UnknownAttribute) {
  ModelBuilder b;
  b.Input("x", kF32, {2}).Output("y");
  AddIntAttr(b.Node("Relu", {"x"}, {"y"}, "relu"), "alpha", 1);
  ExpectError(b.model(), {"node 'relu' (Relu)", "'alpha'", "does not define"});
}

TEST(Verifier, ElementTypeNotAllowedBySchema) {
  ModelBuilder b;
  b.Input("x", onnx::TensorProto::BOOL, {2}).Output("y");
  b.Node("Sqrt", {"x"}, {"y"}, "root");
  ExpectError(b.model(), {"node 'root' (Sqrt)", "'x'", "bool", "Sqrt-13"});
}

TEST(Verifier, ElementTypesDisagree) {
  ModelBuilder b;
  b.Input("x", kF32, {2}).Output("y");
  b.InitializerI64("k", {1, 2});
  b.Node("Add", {"x", "k"}, {"y"}, "mixed_add");
  ExpectError(b.model(), {"node 'mixed_add' (Add)", "'k' is i64", "'x' is f32"});
}

TEST(Verifier, InferredTypeContradictsDeclared) {
  ModelBuilder b = Chain();
  b.ValueInfo("r", kI64, {2, 3});
  // Caught by Relu's type constraint (input and output are both T) before inference runs.
  ExpectError(b.model(), {"node 'relu' (Relu)", "'r' is i64", "'x' is f32"});
}

TEST(Verifier, InferredRankContradictsDeclared) {
  ModelBuilder b = Chain();
  b.ValueInfo("r", kF32, {6});
  ExpectError(b.model(), {"node 'relu' (Relu) output 'r'", "declared [6]", "[2,3]"});
}

TEST(Verifier, ShapeInferenceFailureNamesNode) {
  ModelBuilder b;
  b.Input("a", kF32, {2, 3}).Input("c", kF32, {4, 5}).Output("y");
  b.Node("MatMul", {"a", "c"}, {"y"}, "mm");
  ExpectError(b.model(), {"node 'mm' (MatMul)"});
  ModelBuilder b2;
  b2.Input("a", kF32, {2, 3}).Input("c", kF32, {4, 5}).Output("y");
  b2.Node("Add", {"a", "c"}, {"y"}, "bcast");
  ExpectError(b2.model(), {"node 'bcast' (Add)", "broadcast"});
}

TEST(Verifier, InitializerRawDataOfWrongLength) {
  ModelBuilder b = Chain();
  b.Initializer("w", {2, 3}, {1, 2, 3, 4, 5});  // 5 floats for 6
  ExpectError(b.model(), {"initializer 'w'", "raw_data has 20 bytes", "24"});
}

TEST(Verifier, InitializerTypedDataOfWrongCount) {
  ModelBuilder b = Chain();
  auto* t = b.Initializer("w", {3}, {});
  t->clear_raw_data();
  t->add_float_data(1.f);
  ExpectError(b.model(), {"initializer 'w'", "float_data holds 1", "need 3"});
}

TEST(Verifier, ExternalDataLengthDisagrees) {
  const fs::path dir = fs::temp_directory_path() / "mt_verifier_external";
  fs::create_directories(dir);
  std::ofstream(dir / "w.bin", std::ios::binary) << std::string(64, '\0');
  ModelBuilder b = Chain();
  auto* t = b.Initializer("w", {4}, {});
  t->clear_raw_data();
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  for (auto [k, v] : {std::pair{"location", "w.bin"}, std::pair{"length", "12"}}) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  }
  auto g = ImportOnnxBytes(b.model().SerializeAsString(), dir.string());
  fs::remove_all(dir);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("initializer 'w': external data length 12"),
            absl::string_view::npos)
      << g.status();
}

TEST(Verifier, InitializerElementCountOverflowsInt64) {
  ModelBuilder b = Chain();
  auto* t = b.Initializer("w", {}, {});
  for (int64_t d : {int64_t{1} << 32, int64_t{1} << 32}) t->add_dims(d);
  ExpectError(b.model(), {"initializer 'w'", "more elements than int64"});
}

TEST(Verifier, InitializerAboveMemoryBudgetRefusedBeforeAllocating) {
  ModelBuilder b = Chain();
  auto* t = b.Initializer("w", {}, {});
  t->add_dims(int64_t{1} << 45);  // 128 TiB of floats, no data
  ExpectError(b.model(), {"initializer 'w'", "above the limit", "MIXTRAIN_MAX_TENSOR_BYTES"});
}

TEST(Verifier, MemoryBudgetFromEnvironment) {
  ModelBuilder b = Chain();
  b.Initializer("w", {16}, std::vector<float>(16, 1.f));  // 64 bytes
  ::setenv("MIXTRAIN_MAX_TENSOR_BYTES", "32", 1);
  ExpectError(b.model(), {"initializer 'w'", "above the limit of 32 bytes"});
  ::setenv("MIXTRAIN_MAX_TENSOR_BYTES", "lots", 1);
  ExpectError(b.model(), {"MIXTRAIN_MAX_TENSOR_BYTES='lots'"});
  ::unsetenv("MIXTRAIN_MAX_TENSOR_BYTES");
  EXPECT_TRUE(ImportOnnxBytes(b.model().SerializeAsString(), "").ok());
}

TEST(Verifier, DeclaredInputShapeTooLarge) {
  ModelBuilder b;
  b.Input("x", kF32, {int64_t{1} << 40, int64_t{1} << 40}).Output("y");
  b.Node("Relu", {"x"}, {"y"}, "relu");
  ExpectError(b.model(), {"'x'", "more elements than int64"});
}

TEST(Verifier, InferredShapeTooLarge) {
  ModelBuilder b;
  b.Input("x", kF32, {2}).Output("y");
  b.InitializerI64("shape", {int64_t{1} << 30, int64_t{1} << 30, 2});
  b.Node("Expand", {"x", "shape"}, {"y"}, "blowup");
  ExpectError(b.model(), {"node 'blowup' (Expand) output 'y'", "above the limit"});
}

TEST(Verifier, MixtrainOpArity) {
  ModelBuilder b;
  b.Input("x", kF32, {2}).Output("y");
  b.model();
  onnx::ModelProto m = b.model();
  auto* op = m.add_opset_import();
  op->set_domain("ai.mixtrain");
  op->set_version(1);
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type("ReluGrad");
  n->set_domain("ai.mixtrain");
  n->set_name("rg");
  n->add_input("x");
  n->add_output("y");
  ExpectError(m, {"node 'rg' (ReluGrad)", "1 inputs", "ai.mixtrain.ReluGrad-1", "takes 2"});
}

// Opsets past the ONNX library's (18..21): ops whose inputs changed since are not held to the
// older schema (ReduceMean takes axes as an input from 18 on).
TEST(Verifier, NewerOpsetFormsImport) {
  ModelBuilder b(18);
  b.Input("x", kF32, {2, 3}).Output("y");
  b.InitializerI64("axes", {1});
  b.Node("ReduceMean", {"x", "axes"}, {"y"}, "mean");
  auto g = ImportOnnxBytes(b.model().SerializeAsString(), "");
  EXPECT_TRUE(g.ok()) << g.status();
}

// --- attribute values, op names and declarations (verifier_attributes.cc) ------------------------

// Imported (a viewer shows any op), refused before a pass would run it.
TEST(Verifier, UnknownOpsAreNotRunnableAndNameTheNearest) {
  ModelBuilder b;
  b.Input("x", kF32, {2}).Output("y");
  b.Node("Reul", {"x"}, {"z"}, "typo");
  onnx::ModelProto m = b.model();
  auto* op = m.add_opset_import();
  op->set_domain("com.example");
  op->set_version(1);
  auto* n = m.mutable_graph()->add_node();
  n->set_op_type("Swizzle");
  n->set_domain("com.example");
  n->set_name("custom");
  n->add_input("z");
  n->add_output("y");
  auto g = ImportOnnxBytes(m.SerializeAsString(), "");
  ASSERT_TRUE(g.ok()) << g.status();
  const absl::Status s = VerifyRunnableOps(**g, [](const mixtrain::Node& n) { return n.op_type() != "Swizzle"; });
  EXPECT_EQ(std::string(s.message()),
            "2 nodes of ops mixtrain does not run (it runs ONNX's ops and its own ai.mixtrain ones): node 'typo' "
            "(Reul): no ONNX op (the nearest is 'Relu'); node 'custom' (com.example.Swizzle): no op mixtrain runs");
  EXPECT_TRUE(VerifyRunnableOps(**g, [](const mixtrain::Node&) { return true; }).message().find("Swizzle") ==
              absl::string_view::npos);
  EXPECT_EQ(NearestName("softmx", OnnxOpTypes()), "Softmax");
  EXPECT_TRUE(IsOnnxOpType("Mish"));  // opset 18, newer than the ONNX library
}

TEST(Verifier, AxisOutsideTheRank) {
  ModelBuilder b;
  b.Input("x", kF32, {2, 3}).Output("y");
  AddIntAttr(b.Node("Softmax", {"x"}, {"y"}, "sm"), "axis", int64_t{1} << 40);
  ExpectError(b.model(), {"node 'sm' (Softmax)", "attribute 'axis'", "1099511627776", "outside [-2, 1]"});
  // Flatten's axis may equal the rank (everything in the first dimension); one past it may not.
  for (int64_t axis : {2, 3}) {
    ModelBuilder f;
    f.Input("x", kF32, {2, 3}).Output("y");
    AddIntAttr(f.Node("Flatten", {"x"}, {"y"}, "flat"), "axis", axis);
    if (axis == 2) {
      auto g = ImportOnnxBytes(f.model().SerializeAsString(), "");
      EXPECT_TRUE(g.ok()) << g.status();
    } else {
      ExpectError(f.model(), {"node 'flat' (Flatten)", "axis", "3"});  // Flatten's shape rule refuses it first
    }
  }
}

// Opset 18's Split has no schema in the ONNX library (1.12): its new attribute's type comes from
// the verifier's own table.
TEST(Verifier, NewerOpAttributeOfWrongType) {
  ModelBuilder b(18);
  b.Input("x", kF32, {4}).Output("a").Output("c");
  auto* a = b.Node("Split", {"x"}, {"a", "c"}, "split")->add_attribute();
  a->set_name("num_outputs");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("2");
  ExpectError(b.model(), {"node 'split' (Split)", "attribute 'num_outputs'", "STRING", "wants INT"});
  ModelBuilder zero(18);
  zero.Input("x", kF32, {4}).Output("a");
  AddIntAttr(zero.Node("Split", {"x"}, {"a"}, "split0"), "num_outputs", 0);
  ExpectError(zero.model(), {"node 'split0' (Split)", "'num_outputs' is 0", ">= 1"});
}

TEST(Verifier, FloatAttributesAreFiniteAndEpsilonsNotNegative) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  {
    ModelBuilder b;
    b.Input("a", kF32, {2, 3}).Output("y");
    b.Initializer("w", {3, 4}, std::vector<float>(12, 1.f));
    AddFloatAttr(b.Node("Gemm", {"a", "w"}, {"y"}, "gemm"), "alpha", nan);
    ExpectError(b.model(), {"node 'gemm' (Gemm)", "attribute 'alpha' is nan", "a finite number"});
  }
  for (float eps : {nan, -1e-5f}) {
    ModelBuilder b;
    b.Input("x", kF32, {2, 3}).Output("y");
    b.Initializer("scale", {3}, {1, 1, 1});
    b.Initializer("bias", {3}, {0, 0, 0});
    AddFloatAttr(b.Node("LayerNormalization", {"x", "scale", "bias"}, {"y"}, "ln"), "epsilon", eps);
    ExpectError(b.model(), {"node 'ln' (LayerNormalization)", "attribute 'epsilon'",
                            std::isnan(eps) ? "a finite number" : ">= 0"});
  }
  {
    ModelBuilder b;
    b.Input("x", kF32, {2, 3}).Output("y");
    for (const char* name : {"s", "b", "m", "v"}) b.Initializer(name, {3}, {1, 1, 1});
    AddFloatAttr(b.Node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"}, "bn"), "momentum", inf);
    ExpectError(b.model(), {"node 'bn' (BatchNormalization)", "attribute 'momentum' is inf"});
  }
  // A Constant's value is data: -inf (an attention mask) is meaningful.
  ModelBuilder c;
  c.Output("y");
  AddFloatAttr(c.Node("Constant", {}, {"y"}, "mask"), "value_float", -inf);
  auto g = ImportOnnxBytes(c.model().SerializeAsString(), "");
  EXPECT_TRUE(g.ok()) << g.status();
}

// Found accepted by the mutation probe (tools/probe): flags other than 0 or 1, string choices
// no op defines.
TEST(Verifier, FlagsAndStringChoices) {
  {
    ModelBuilder b;
    b.Input("a", kF32, {2, 3}).Output("y");
    b.Initializer("w", {3, 4}, std::vector<float>(12, 1.f));
    AddIntAttr(b.Node("Gemm", {"a", "w"}, {"y"}, "gemm"), "transB", 3);
    ExpectError(b.model(), {"node 'gemm' (Gemm)", "attribute 'transB' is 3", "0 or 1"});
  }
  {
    ModelBuilder b;
    b.Input("x", kF32, {1, 1, 4, 4}).Output("y");
    auto* a = b.Node("MaxPool", {"x"}, {"y"}, "pool")->add_attribute();
    a->set_name("auto_pad");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s("SAME");
    onnx::ModelProto m = b.model();
    auto* ks = m.mutable_graph()->mutable_node(0)->add_attribute();
    ks->set_name("kernel_shape");
    ks->set_type(onnx::AttributeProto::INTS);
    ks->add_ints(2);
    ks->add_ints(2);
    ExpectError(m, {"node 'pool' (MaxPool)", "attribute 'auto_pad' is 'SAME'", "NOTSET, SAME_UPPER, SAME_LOWER, VALID"});
  }
}

TEST(Verifier, DeclaredTypesHaveNoNegativeDimensions) {
  // value_info of a name no node uses is still a declaration the file makes.
  ModelBuilder b = Chain();
  b.ValueInfo("unused", kF32, {2, -3});
  ExpectError(b.model(), {"value 'unused'", "negative dimension -3"});
}

TEST(Verifier, GraphInputNeedsAnElementType) {
  ModelBuilder b = Chain();
  onnx::ModelProto m = b.model();
  auto* tt = m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::UNDEFINED);
  ExpectError(m, {"graph input 'x'", "no element type"});
}

TEST(Verifier, ShippedAndTestModelsImport) {
  const std::string root = MT_SOURCE_DIR;
  int n = 0;
  for (const std::string dir : {"/models", "/tests/data/zoo", "/tests/data/grad"}) {
    if (!fs::exists(root + dir)) continue;
    for (const auto& e : fs::directory_iterator(root + dir)) {
      if (e.path().extension() != ".onnx") continue;
      SCOPED_TRACE(e.path().string());
      auto g = ImportOnnxFile(e.path().string());
      EXPECT_TRUE(g.ok()) << g.status();
      if (g.ok()) {
        EXPECT_TRUE(Verify(**g).ok());
      }
      ++n;
    }
  }
  EXPECT_GE(n, 4);
}

}  // namespace
}  // namespace mixtrain
