// The step flags generated from proto/mixtrain.proto's field options (tools/step_flags_fields.inc):
// every one of them, given at once to `mixtrain train --print-config`, sets the field its row
// names to the value given, as the printed config (a --config file) shows; and each appears in
// train's --help with its default and rule.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "api/convert.h"
#include "google/protobuf/text_format.h"
#include "mixtrain/train_config.h"
#include "tests/tools/cli_test_util.h"

namespace mixtrain {
namespace {

enum FieldFlagKind { kString, kNumber, kBool, kEnum };

struct Row {
  std::string flag, path, values;
  FieldFlagKind kind;
};

std::vector<Row> Rows() {
  std::vector<Row> rows;
#define MT_STEP_FLAG(name, def, help, kind, path, member, values) rows.push_back({name, path, values, kind});
#include "tools/step_flags_fields.inc"
#undef MT_STEP_FLAG
  return rows;
}

// A value the field's rule takes that is not its default.
std::string NumberFor(const std::string& path) {
  const NumberRule* rule = TrainConfig::NumberRuleOf(path);
  EXPECT_NE(rule, nullptr) << path;
  if (rule == nullptr) return "0";
  for (double v : {3.0, 0.25, 2.0, 7.0, 0.5, -1.0})
    if (rule->Accepts(v)) return absl::StrCat(v);
  ADD_FAILURE() << path << ": no sample value";
  return "0";
}

// The field `path` of `c` as text ("0.25", "\"mse\"", "SGD", "true").
std::string FieldText(const pb::TrainConfig& c, const std::string& path) {
  const google::protobuf::Message* m = &c;
  std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    const google::protobuf::FieldDescriptor* f = m->GetDescriptor()->FindFieldByName(parts[i]);
    if (f == nullptr) return "<no field " + path + ">";
    if (i + 1 < parts.size()) {
      m = &m->GetReflection()->GetMessage(*m, f);
      continue;
    }
    if (!m->GetReflection()->HasField(*m, f)) return "<unset>";
    std::string out;
    google::protobuf::TextFormat::PrintFieldValueToString(*m, f, -1, &out);
    return out;
  }
  return "";
}

// `mixtrain ARGS` with its output caught in a folder of this test's own (the suite runs in
// parallel: a shared file would catch another test's output).
cli_test::Result RunInScratch(const std::string& args) {
  const std::filesystem::path dir = cli_test::ScratchDir("step_flags");
  cli_test::Result r = cli_test::RunShell(cli_test::kBinary + " " + args, dir);
  std::filesystem::remove_all(dir);
  return r;
}

TEST(StepFlagsFields, EachSetsItsField) {
  const std::vector<Row> rows = Rows();
  ASSERT_GT(rows.size(), 20u);
  std::string args;
  std::vector<std::string> want(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::string value;
    switch (r.kind) {
      case kString:
        value = r.flag == "device" ? "cpu" : "v_" + absl::StrReplaceAll(r.flag, {{"-", "_"}});
        want[i] = "\"" + value + "\"";
        break;
      case kNumber:
        value = NumberFor(r.path);
        want[i] = value;
        break;
      case kBool:
        want[i] = "true";
        break;
      case kEnum: {
        const std::vector<std::string> names = absl::StrSplit(r.values, ',');
        want[i] = names.back();  // never the default, the first
        value = absl::AsciiStrToLower(names.back());
        break;
      }
    }
    args += r.kind == kBool ? " --" + r.flag : " --" + r.flag + "=" + value;
  }
  const cli_test::Result out = RunInScratch("train --print-config" + args);
  ASSERT_EQ(out.code, 0) << out.err << "\nargs:" << args;
  auto parsed = TrainConfig::FromTextProto(out.out);
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << out.out;
  const pb::TrainConfig p = api::ToProto(*parsed);
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string got = FieldText(p, rows[i].path);
    if (rows[i].kind == kNumber) {
      double g = 0, w = 0;
      ASSERT_TRUE(absl::SimpleAtod(got, &g) && absl::SimpleAtod(want[i], &w)) << rows[i].flag << ": " << got;
      EXPECT_FLOAT_EQ(g, w) << "--" << rows[i].flag << " -> " << rows[i].path;
    } else {
      EXPECT_EQ(got, want[i]) << "--" << rows[i].flag << " -> " << rows[i].path;
    }
  }
}

TEST(StepFlagsFields, EachIsInTrainsHelp) {
  const cli_test::Result help = RunInScratch("train --help");
  ASSERT_EQ(help.code, 0) << help.err;
  for (const Row& r : Rows()) EXPECT_NE(help.out.find("  --" + r.flag), std::string::npos) << r.flag;
  EXPECT_NE(help.out.find("--lr=...                 learning rate (default: 0.001; a finite number > 0)"),
            std::string::npos)
      << help.out;
}

}  // namespace
}  // namespace mixtrain
