// ONNX export: checker validity, byte-identical round trips (fixtures and every models/*.onnx),
// annotations, value_info, atomic saving and external data for large models.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "graph/onnx_export.h"
#include "graph/onnx_import.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
const std::string kData = std::string(MT_SOURCE_DIR) + "/tests/data/onnxio/";

// import(path) -> export -> import -> export; returns both exports' bytes.
void RoundTrip(const std::string& path, std::string* first, std::string* second) {
  auto g1 = ImportOnnxFile(path);
  ASSERT_TRUE(g1.ok()) << g1.status();
  *first = SerializeDeterministic(ExportOnnx(**g1));
  auto g2 = ImportOnnxBytes(*first, fs::path(path).parent_path().string());
  ASSERT_TRUE(g2.ok()) << g2.status();
  *second = SerializeDeterministic(ExportOnnx(**g2));
}

fs::path TempDir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("mt_onnxio_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(OnnxExport, TinyRoundTripIsIdenticalAndChecks) {
  std::string a, b;
  RoundTrip(kData + "tiny.onnx", &a, &b);
  EXPECT_EQ(a, b);
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(a));
  EXPECT_TRUE(CheckOnnxModel(m).ok()) << CheckOnnxModel(m);
  EXPECT_EQ(m.graph().node_size(), 8);
  EXPECT_EQ(m.producer_name(), "fixture");
  ASSERT_EQ(m.metadata_props_size(), 1);
  EXPECT_EQ(m.metadata_props(0).key(), "purpose");
  EXPECT_EQ(m.opset_import(0).version(), 17);
  // Names and order are kept.
  EXPECT_EQ(m.graph().node(0).name(), "conv");
  EXPECT_EQ(m.graph().node(7).name(), "fc");
  // The annotation travels in the doc_string.
  EXPECT_EQ(m.graph().node(1).doc_string(), "mixtrain:precision=f16");
  // Every intermediate value with a known type has value_info, with the symbolic batch dim.
  bool saw_r16 = false;
  for (const auto& vi : m.graph().value_info()) {
    if (vi.name() != "r16") continue;
    saw_r16 = true;
    EXPECT_EQ(vi.type().tensor_type().elem_type(), onnx::TensorProto::FLOAT16);
    EXPECT_EQ(vi.type().tensor_type().shape().dim(0).dim_param(), "N");
  }
  EXPECT_TRUE(saw_r16);
}

TEST(OnnxExport, AnnotationsRoundTrip) {
  auto g = ImportOnnxFile(kData + "tiny.onnx");
  ASSERT_TRUE(g.ok()) << g.status();
  Node* conv = (*g)->nodes()[0].get();
  conv->doc_string = "a 3x3 conv";
  conv->annotations()["precision"] = "bf16";
  conv->annotations()["owner"] = "test";
  auto back = ImportOnnxBytes(SerializeDeterministic(ExportOnnx(**g)), "");
  ASSERT_TRUE(back.ok()) << back.status();
  const Node* c = (*back)->nodes()[0].get();
  EXPECT_EQ(c->doc_string, "a 3x3 conv");
  EXPECT_EQ(c->annotations(), conv->annotations());
}

TEST(OnnxExport, ExternalDataRoundTrip) {
  std::string a, b;
  RoundTrip(kData + "external/model.onnx", &a, &b);
  EXPECT_EQ(a, b);
}

TEST(OnnxExport, SaveWithExternalDataAboveThreshold) {
  fs::path dir = TempDir("save_external");
  auto g = ImportOnnxFile(kData + "tiny.onnx");
  ASSERT_TRUE(g.ok()) << g.status();
  OnnxSaveOptions opts;
  opts.external_data_threshold = 100;  // tiny's 480 bytes of weights are "large" here
  opts.external_min_bytes = 64;
  const std::string path = (dir / "m.onnx").string();
  ASSERT_TRUE(SaveOnnxFile(**g, path, opts).ok());
  ASSERT_TRUE(fs::exists(dir / "m.onnx.data"));
  // conv.w (432 bytes) is external, conv.b (16 bytes) stays inline.
  EXPECT_EQ(fs::file_size(dir / "m.onnx.data"), 432u);
  onnx::ModelProto m;
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(m.ParseFromIstream(&in));
  for (const auto& t : m.graph().initializer())
    EXPECT_EQ(t.data_location() == onnx::TensorProto::EXTERNAL, t.name() == "conv.w") << t.name();
  auto back = ImportOnnxFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE((*back)->FindValue("conv.w")->initializer->Identical(
      *(*g)->FindValue("conv.w")->initializer));
  // Saved without the threshold, the same graph exports the same bytes as before.
  EXPECT_EQ(SerializeDeterministic(ExportOnnx(**back)), SerializeDeterministic(ExportOnnx(**g)));
  fs::remove_all(dir);
}

TEST(OnnxExport, SaveIsAtomic) {
  fs::path dir = TempDir("atomic");
  auto g = ImportOnnxFile(kData + "tiny.onnx");
  ASSERT_TRUE(g.ok()) << g.status();
  // Into a folder that does not exist: an error naming the path, nothing written.
  absl::Status s = SaveOnnxFile(**g, (dir / "missing" / "m.onnx").string());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("m.onnx"), absl::string_view::npos) << s;
  // Over a folder: rename fails, the temp file is cleaned up.
  fs::create_directories(dir / "taken.onnx" / "x");
  s = SaveOnnxFile(**g, (dir / "taken.onnx").string());
  EXPECT_FALSE(s.ok());
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) entries += e.path().filename() != "taken.onnx";
  EXPECT_EQ(entries, 0) << "a temp file was left behind";
  // A good save replaces an existing file completely.
  { std::ofstream(dir / "m.onnx") << "old junk that is longer than nothing"; }
  ASSERT_TRUE(SaveOnnxFile(**g, (dir / "m.onnx").string()).ok());
  EXPECT_TRUE(ImportOnnxFile((dir / "m.onnx").string()).ok());
  fs::remove_all(dir);
}

TEST(OnnxExport, GraphBuiltInCodePassesChecker) {
  Graph g;
  g.opset_imports[""] = 17;
  Value* x = g.AddValue("x", DType::kF32, Shape({Dim::Symbol("batch"), 4}));
  g.AddInput(x);
  Value* w = g.AddInitializer("w", Tensor(DType::kF32, {4, 2}));
  Node* mm = g.AddNode("MatMul", {x, w}, 1, "mm");
  mm->output(0)->dtype = DType::kF32;
  mm->output(0)->shape = Shape({Dim::Symbol("batch"), 2});
  Node* cast = g.AddNode("Cast", {mm->output(0)}, 1, "cast");
  cast->SetAttr(Attribute::Int("to", 10));
  cast->output(0)->dtype = DType::kF16;
  cast->output(0)->shape = mm->output(0)->shape;
  g.AddOutput(cast->output(0));
  onnx::ModelProto m = ExportOnnx(g);
  EXPECT_TRUE(CheckOnnxModel(m).ok()) << CheckOnnxModel(m);
  // The checker does see errors: a MatMul with a third input is refused.
  m.mutable_graph()->mutable_node(0)->add_input("w");
  EXPECT_FALSE(CheckOnnxModel(m).ok());
}

// Every committed model: round trip identical; checker for opset <= 17 (the ONNX library's max).
TEST(OnnxExport, ModelsFolderRoundTrips) {
  fs::path models = fs::path(MT_SOURCE_DIR) / "models";
  int count = 0;
  if (fs::exists(models)) {
    for (const auto& e : fs::directory_iterator(models)) {
      if (e.path().extension() != ".onnx") continue;
      SCOPED_TRACE(e.path().string());
      ++count;
      std::string a, b;
      RoundTrip(e.path().string(), &a, &b);
      EXPECT_EQ(a, b) << "round trip differs";
      onnx::ModelProto m;
      ASSERT_TRUE(m.ParseFromString(a));
      int64_t opset = 0;
      for (const auto& op : m.opset_import())
        if (op.domain().empty()) opset = op.version();
      if (opset <= 17) EXPECT_TRUE(CheckOnnxModel(m).ok()) << CheckOnnxModel(m);
    }
  }
  std::printf("models/*.onnx round-tripped: %d\n", count);
}

}  // namespace
}  // namespace mixtrain
