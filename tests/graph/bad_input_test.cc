// Bad ONNX input: every case returns an error naming the file / node / value / opset / path, and
// random mutations of a valid model never crash the importer.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "graph/verifier.h"

namespace mixtrain {
namespace {

namespace fs = std::filesystem;
const std::string kData = std::string(MT_SOURCE_DIR) + "/tests/data/onnxio/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mt_bad_input_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tiny_ = ReadFile(kData + "tiny.onnx");
    ASSERT_FALSE(tiny_.empty());
    ASSERT_TRUE(model_.ParseFromString(tiny_));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes bytes to a file and imports it; expects an error containing every `needle` and the path.
  void ExpectFileError(const std::string& bytes, std::initializer_list<std::string> needles) {
    std::string path = (dir_ / "m.onnx").string();
    std::ofstream(path, std::ios::binary) << bytes;
    auto g = ImportOnnxFile(path);
    ASSERT_FALSE(g.ok());
    std::string msg(g.status().message());
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
  void ExpectModelError(const onnx::ModelProto& m, std::initializer_list<std::string> needles) {
    ExpectFileError(m.SerializeAsString(), needles);
  }

  fs::path dir_;
  std::string tiny_;
  onnx::ModelProto model_;
};

TEST_F(BadInput, EmptyFile) { ExpectFileError("", {"empty"}); }

TEST_F(BadInput, TruncatedFile) {
  ExpectFileError(tiny_.substr(0, tiny_.size() / 2), {"truncated or corrupt"});
}

TEST_F(BadInput, RandomBytes) {
  std::mt19937 rng(7);
  std::string junk(4096, '\0');
  for (char& c : junk) c = static_cast<char>(rng());
  ExpectFileError(junk, {"not a valid ONNX model"});
}

TEST_F(BadInput, MissingFileAndFolder) {
  auto g = ImportOnnxFile((dir_ / "nope.onnx").string());
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("nope.onnx"), absl::string_view::npos);
  g = ImportOnnxFile(dir_.string());
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("folder"), absl::string_view::npos) << g.status();
}

TEST_F(BadInput, MissingInitializer) {
  // Remove fc.w: the Gemm node's weight input is produced by nothing.
  auto* inits = model_.mutable_graph()->mutable_initializer();
  for (int i = 0; i < inits->size(); ++i)
    if (inits->Get(i).name() == "fc.w") inits->DeleteSubrange(i, 1);
  ExpectModelError(model_, {"'fc'", "fc.w", "not produced"});
}

TEST_F(BadInput, DanglingNodeInput) {
  model_.mutable_graph()->mutable_node(1)->set_input(0, "ghost");
  ExpectModelError(model_, {"'relu'", "ghost"});
}

TEST_F(BadInput, GraphOutputNothingProduces) {
  model_.mutable_graph()->mutable_output(0)->set_name("phantom");
  ExpectModelError(model_, {"phantom"});
}

TEST_F(BadInput, DuplicateOutputName) {
  model_.mutable_graph()->mutable_node(2)->set_output(0, "r");  // to_f16 also produces 'r'
  ExpectModelError(model_, {"duplicate output name 'r'", "to_f16", "relu"});
}

TEST_F(BadInput, UnknownOpStillImports) {
  auto g = ImportOnnxFile(kData + "unknown_op.onnx");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ((*g)->num_nodes(), 2u);
  EXPECT_EQ((*g)->nodes()[0]->op_type(), "FancyOp");
  EXPECT_EQ((*g)->nodes()[1]->domain(), "com.example");
  EXPECT_TRUE(Verify(**g).ok());
}

TEST_F(BadInput, OpsetOutOfRange) {
  for (int64_t v : {5, 99}) {
    model_.mutable_opset_import(0)->set_version(v);
    ExpectModelError(model_, {absl::StrCat("opset ", v), "6 to 21"});
  }
}

TEST_F(BadInput, ExternalDataEscapingFolder) {
  for (const std::string& loc : {std::string("../x.bin"), std::string("/etc/passwd"),
                                 std::string("sub/../../x.bin")}) {
    onnx::ModelProto m = model_;
    auto* t = m.mutable_graph()->mutable_initializer(0);
    t->clear_raw_data();
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* e = t->add_external_data();
    e->set_key("location");
    e->set_value(loc);
    ExpectModelError(m, {"'" + loc + "'", "conv.w"});
  }
}

TEST_F(BadInput, ExternalDataMissingOrShort) {
  onnx::ModelProto m = model_;
  auto* t = m.mutable_graph()->mutable_initializer(0);
  t->clear_raw_data();
  t->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* e = t->add_external_data();
  e->set_key("location");
  e->set_value("w.bin");
  ExpectModelError(m, {"w.bin"});
  std::ofstream(dir_ / "w.bin", std::ios::binary) << "short";
  ExpectModelError(m, {"w.bin", "bytes"});
}

TEST_F(BadInput, HugeDimsFailWithoutAllocating) {
  auto* t = model_.mutable_graph()->mutable_initializer(0);
  t->clear_dims();
  t->add_dims(int64_t{1} << 40);
  t->add_dims(int64_t{1} << 40);
  ExpectModelError(model_, {"conv.w"});
}

TEST_F(BadInput, UnsupportedElementTypeNamesValue) {
  auto* tt = model_.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::UINT32);
  ExpectModelError(model_, {"'x'", "element type"});
}

// Random byte flips, inserts and deletes of a valid model: each import is OK or a clean error;
// a graph that imports also verifies and exports.
TEST_F(BadInput, MutationFuzz) {
  std::mt19937 rng(20240611);
  int ok = 0, errors = 0;
  constexpr int kCases = 5000;
  for (int i = 0; i < kCases; ++i) {
    std::string bytes = tiny_;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      size_t pos = rng() % bytes.size();
      switch (rng() % 3) {
        case 0: bytes[pos] = static_cast<char>(bytes[pos] ^ (1 << (rng() % 8))); break;
        case 1: bytes.insert(pos, 1, static_cast<char>(rng())); break;
        default: bytes.erase(pos, 1 + rng() % 8); break;
      }
    }
    auto g = ImportOnnxBytes(bytes, "");
    if (!g.ok()) {
      ++errors;
      EXPECT_FALSE(g.status().message().empty());
      continue;
    }
    ++ok;
    EXPECT_TRUE(Verify(**g).ok()) << "case " << i;
    onnx::ModelProto out = ExportOnnx(**g);
    EXPECT_TRUE(ImportOnnxBytes(SerializeDeterministic(out), "").ok()) << "case " << i;
  }
  std::printf("mutation fuzz: %d cases, %d imported, %d clean errors\n", kCases, ok, errors);
  EXPECT_EQ(ok + errors, kCases);
}

// A FIFO in place of a model is refused at once (reading it would block until a writer came).
TEST(BadInputFile, AFifoIsNotReadAsAModel) {
  const fs::path fifo = fs::temp_directory_path() / ("mt_fifo_model_" + std::to_string(::getpid()) + ".onnx");
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto g = ImportOnnxFile(fifo.string());
  fs::remove(fifo);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(std::string(g.status().message()).find("not a regular file"), std::string::npos) << g.status();
}

}  // namespace
}  // namespace mixtrain
