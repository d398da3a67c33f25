// gen_train_config: writes the code that mirrors proto/mixtrain.proto's TrainConfig, so a
// training setting is one proto field (docs/architecture.md, "Adding a training setting"):
//   include/mixtrain/train_config_fields.h  the public struct's fields, with the proto's names,
//                                           defaults and comments (TrainConfig derives from it)
//   api/train_config_fields.inc             MT_CONFIG_FIELD rows: every scalar and list field with
//                                           its text-format path (the proto conversions), and
//                                           MT_NUMBER_RULE rows: each number's rule
//   tools/step_flags_fields.inc             MT_STEP_FLAG rows: the step flags fields name
// It reads the schema as a FileDescriptorSet with source info (the build makes
// build/proto/mixtrain.desc with protoc) and the field options declared in the proto (flag,
// flag_help, rule, presence, cpp_name).
//   gen_train_config DESC SOURCE_DIR           exit 1 naming each file that differs (a test)
//   gen_train_config DESC SOURCE_DIR --write   write them
// The files are committed so that they can be read and reviewed; the test keeps them current.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.pb.h"
#include "proto/mixtrain_pb.h"

namespace {

using google::protobuf::DescriptorProto;
using google::protobuf::EnumDescriptorProto;
using google::protobuf::FieldDescriptorProto;
using google::protobuf::FileDescriptorProto;
using google::protobuf::SourceCodeInfo;

const FileDescriptorProto* file = nullptr;

// The comments protoc kept for an element by its path in the file.
struct Comments {
  std::string leading, trailing;
};
std::map<std::vector<int>, Comments> comments;

void IndexComments(const SourceCodeInfo& info) {
  for (const SourceCodeInfo::Location& l : info.location()) {
    std::vector<int> path(l.path().begin(), l.path().end());
    comments[path] = {l.leading_comments(), l.trailing_comments()};
  }
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && line[0] == ' ') line.erase(0, 1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
    out.push_back(line);
  }
  while (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

// "loss_scaler" -> "LossScaler"; "ADAGRAD" -> "kAdagrad".
std::string Camel(const std::string& s, bool lower_rest) {
  std::string out;
  bool up = true;
  for (char c : s) {
    if (c == '_') {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
              : (lower_rest ? static_cast<char>(std::tolower(static_cast<unsigned char>(c))) : c);
    up = false;
  }
  return out;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int MessageIndex(const std::string& type_name) {  // ".mixtrain.pb.OptimizerConfig"
  const std::string name = type_name.substr(type_name.rfind('.') + 1);
  for (int i = 0; i < file->message_type_size(); ++i)
    if (file->message_type(i).name() == name) return i;
  std::fprintf(stderr, "gen_train_config: no message %s\n", type_name.c_str());
  std::exit(2);
}

// The enum `type_name` names, nested in message `m` (index `mi`), and its index there.
const EnumDescriptorProto& FindEnum(const std::string& type_name, int* mi, int* ei) {
  const std::string name = type_name.substr(type_name.rfind('.') + 1);
  for (int i = 0; i < file->message_type_size(); ++i)
    for (int j = 0; j < file->message_type(i).enum_type_size(); ++j)
      if (file->message_type(i).enum_type(j).name() == name &&
          type_name.find("." + file->message_type(i).name() + ".") != std::string::npos) {
        *mi = i;
        *ei = j;
        return file->message_type(i).enum_type(j);
      }
  std::fprintf(stderr, "gen_train_config: no enum %s\n", type_name.c_str());
  std::exit(2);
}

std::string Enumerator(const google::protobuf::EnumValueDescriptorProto& v) {
  const std::string& own = v.options().GetExtension(mixtrain::pb::cpp_name);
  if (!own.empty()) return own;
  std::string out = "k";  // (not "k" + ...: GCC 12's -Wrestrict misfires on that operator+)
  out += Camel(v.name(), true);
  return out;
}

std::string CppType(const FieldDescriptorProto& f) {
  switch (f.type()) {
    case FieldDescriptorProto::TYPE_STRING: return "std::string";
    case FieldDescriptorProto::TYPE_INT32: return "int32_t";
    case FieldDescriptorProto::TYPE_INT64: return "int64_t";
    case FieldDescriptorProto::TYPE_UINT64: return "uint64_t";
    case FieldDescriptorProto::TYPE_FLOAT: return "float";
    case FieldDescriptorProto::TYPE_BOOL: return "bool";
    case FieldDescriptorProto::TYPE_ENUM: return f.type_name().substr(f.type_name().rfind('.') + 1);
    default:
      std::fprintf(stderr, "gen_train_config: field %s has a type the generator does not map\n", f.name().c_str());
      std::exit(2);
  }
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// The field's default as C++ ("" when the type's own default is it).
std::string CppDefault(const FieldDescriptorProto& f) {
  const std::string& d = f.default_value();
  switch (f.type()) {
    case FieldDescriptorProto::TYPE_STRING: return f.has_default_value() ? Quote(d) : "";
    case FieldDescriptorProto::TYPE_FLOAT: {
      std::string v = f.has_default_value() ? d : "0";
      if (v.find_first_of(".eE") == std::string::npos) v += ".0";
      return v + "f";
    }
    case FieldDescriptorProto::TYPE_BOOL: return f.has_default_value() ? d : "false";
    case FieldDescriptorProto::TYPE_ENUM: {
      int mi, ei;
      const EnumDescriptorProto& e = FindEnum(f.type_name(), &mi, &ei);
      for (const auto& v : e.value())
        if (!f.has_default_value() || v.name() == d) return e.name() + "::" + Enumerator(v);
      return "";
    }
    default: return f.has_default_value() ? d : "0";
  }
}

// The default as the flag's --help shows it.
std::string FlagDefault(const FieldDescriptorProto& f) {
  if (f.options().GetExtension(mixtrain::pb::presence)) return "";
  switch (f.type()) {
    case FieldDescriptorProto::TYPE_ENUM: {
      int mi, ei;
      const EnumDescriptorProto& e = FindEnum(f.type_name(), &mi, &ei);
      return Lower(f.has_default_value() ? f.default_value() : e.value(0).name());
    }
    case FieldDescriptorProto::TYPE_FLOAT: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%g", f.has_default_value() ? std::stod(f.default_value()) : 0.0);
      return buf;
    }
    case FieldDescriptorProto::TYPE_BOOL: return f.has_default_value() ? f.default_value() : "false";
    case FieldDescriptorProto::TYPE_STRING: return f.default_value();
    default: return f.has_default_value() ? f.default_value() : "0";
  }
}

// "(0, inf)", "[0, 1)", "int [1, 2147483647]" -> a NumberRule expression.
std::string RuleExpr(const std::string& rule, const std::string& field) {
  std::string r = rule;
  const bool integer = r.rfind("int ", 0) == 0;
  if (integer) r = r.substr(4);
  const size_t comma = r.find(',');
  if (r.size() < 5 || (r[0] != '(' && r[0] != '[') || (r.back() != ')' && r.back() != ']') || comma == std::string::npos) {
    std::fprintf(stderr, "gen_train_config: %s: bad rule '%s'\n", field.c_str(), rule.c_str());
    std::exit(2);
  }
  auto bound = [](std::string b) {
    while (!b.empty() && b[0] == ' ') b.erase(0, 1);
    while (!b.empty() && b.back() == ' ') b.pop_back();
    if (b == "inf") return std::string("NumberRule::kUnbounded");
    if (b == "-inf") return std::string("-NumberRule::kUnbounded");
    return b;
  };
  const std::string lo = bound(r.substr(1, comma - 1)), hi = bound(r.substr(comma + 1, r.size() - comma - 2));
  if (integer) return "NumberRule::Integer(" + lo + ", " + hi + ")";
  // An infinite bound is no value either way: open or closed says the same.
  const bool min_open = r[0] == '(' && lo != "-NumberRule::kUnbounded";
  const bool max_open = r.back() == ')' && hi != "NumberRule::kUnbounded";
  return "NumberRule::Float(" + lo + ", " + hi + ", " + (min_open ? "true" : "false") + ", " +
         (max_open ? "true" : "false") + ")";
}

void Comment(std::ostream& o, const std::string& indent, const std::string& text) {
  for (const std::string& line : Lines(text)) o << indent << (line.empty() ? "//" : "// " + line) << "\n";
}

struct Outputs {
  std::ostringstream header, fields, flags;
};

// Emits message `mi`'s fields into the struct body at `indent`; `prefix` is the text-format path
// of the message ("" for TrainConfig, "optimizer." ...), `member` the C++ one.
void EmitMessage(Outputs& out, int mi, const std::string& indent, const std::string& prefix) {
  const DescriptorProto& m = file->message_type(mi);
  for (int ei = 0; ei < m.enum_type_size(); ++ei) {
    const EnumDescriptorProto& e = m.enum_type(ei);
    Comment(out.header, indent, comments[{4, mi, 4, ei}].leading);
    out.header << indent << "enum class " << e.name() << " {\n";
    for (int vi = 0; vi < e.value_size(); ++vi) {
      const Comments& c = comments[{4, mi, 4, ei, 2, vi}];
      out.header << indent << "  " << Enumerator(e.value(vi)) << ",";
      const std::vector<std::string> t = Lines(c.trailing);
      if (!t.empty()) out.header << "  // " << t[0];
      out.header << "\n";
    }
    out.header << indent << "};\n";
  }
  for (int fi = 0; fi < m.field_size(); ++fi) {
    const FieldDescriptorProto& f = m.field(fi);
    const Comments& c = comments[{4, mi, 2, fi}];
    const std::string path = prefix + f.name();
    if (f.type() == FieldDescriptorProto::TYPE_MESSAGE) {
      const int sub = MessageIndex(f.type_name());
      const std::string type = Camel(f.name(), false);
      out.header << "\n";
      Comment(out.header, indent, comments[{4, sub}].leading);
      Comment(out.header, indent, c.leading);
      out.header << indent << "struct " << type << " {  // " << file->package() << "." << file->message_type(sub).name()
                 << "\n";
      EmitMessage(out, sub, indent + "  ", path + ".");
      out.header << indent << "};\n" << indent << type << " " << f.name() << ";\n";
      continue;
    }
    Comment(out.header, indent, c.leading);
    const bool repeated = f.label() == FieldDescriptorProto::LABEL_REPEATED;
    const bool presence = f.options().GetExtension(mixtrain::pb::presence);
    std::string type = CppType(f);
    if (repeated) type = "std::vector<" + type + ">";
    if (presence) type = "std::optional<" + type + ">";
    out.header << indent << type << " " << f.name();
    const std::string def = repeated || presence ? "" : CppDefault(f);
    if (!def.empty()) out.header << " = " << def;
    out.header << ";";
    const std::vector<std::string> t = Lines(c.trailing);
    for (size_t i = 0; i < t.size(); ++i) out.header << (i == 0 ? "  // " : "\n" + indent + "// ") << t[i];
    out.header << "\n";

    out.fields << "MT_CONFIG_FIELD(" << Quote(path) << ", " << path << ")\n";
    const std::string& rule = f.options().GetExtension(mixtrain::pb::rule);
    if (!rule.empty()) out.fields << "MT_NUMBER_RULE(" << Quote(path) << ", " << path << ", " << RuleExpr(rule, path) << ")\n";
    const std::string& flag = f.options().GetExtension(mixtrain::pb::flag);
    if (!flag.empty()) {
      std::string kind = "kString";
      if (!rule.empty()) kind = "kNumber";
      if (f.type() == FieldDescriptorProto::TYPE_BOOL) kind = "kBool";
      if (f.type() == FieldDescriptorProto::TYPE_ENUM) kind = "kEnum";
      std::string values;
      if (kind == "kEnum") {
        int emi, eei;
        for (const auto& v : FindEnum(f.type_name(), &emi, &eei).value()) values += (values.empty() ? "" : ",") + v.name();
      }
      out.flags << "MT_STEP_FLAG(" << Quote(flag) << ", " << Quote(FlagDefault(f)) << ",\n             "
                << Quote(f.options().GetExtension(mixtrain::pb::flag_help)) << ",\n             " << kind << ", "
                << Quote(path) << ", " << path << ", " << Quote(values) << ")\n";
    }
  }
}

bool Sync(const std::string& path, const std::string& text, bool write) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream have;
  have << in.rdbuf();
  if (in && have.str() == text) return true;
  if (!write) {
    std::fprintf(stderr, "gen_train_config: %s is not what proto/mixtrain.proto gives; run "
                 "build/gen_train_config build/proto/mixtrain.desc . --write\n", path.c_str());
    return false;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) {
    std::fprintf(stderr, "gen_train_config: cannot write %s\n", path.c_str());
    return false;
  }
  std::printf("wrote %s\n", path.c_str());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: gen_train_config DESC SOURCE_DIR [--write]\n");
    return 2;
  }
  const bool write = argc > 3 && std::string(argv[3]) == "--write";
  std::ifstream in(argv[1], std::ios::binary);
  google::protobuf::FileDescriptorSet set;
  if (!in || !set.ParseFromIstream(&in)) {
    std::fprintf(stderr, "gen_train_config: cannot read the descriptor set %s\n", argv[1]);
    return 2;
  }
  for (const FileDescriptorProto& f : set.file())
    if (f.name() == "proto/mixtrain.proto") file = &f;
  if (file == nullptr || !file->has_source_code_info()) {
    std::fprintf(stderr, "gen_train_config: %s has no proto/mixtrain.proto with source info\n", argv[1]);
    return 2;
  }
  IndexComments(file->source_code_info());
  int top = -1;
  for (int i = 0; i < file->message_type_size(); ++i)
    if (file->message_type(i).name() == "TrainConfig") top = i;
  Outputs out;
  const char* banner = "// Generated by proto/gen_train_config.cc from proto/mixtrain.proto: edit the proto, then run\n"
                       "// build/gen_train_config build/proto/mixtrain.desc . --write (a test fails while it differs).\n";
  out.header << banner
             << "// The fields of TrainConfig (include/mixtrain/train_config.h), message by message, with the\n"
                "// proto's names, defaults and comments; optional where the library tells an unset field from\n"
                "// one set to its default.\n"
                "#pragma once\n\n#include <cstdint>\n#include <optional>\n#include <string>\n#include <vector>\n\n"
                "namespace mixtrain {\ninline namespace v1 {\n\n";
  Comment(out.header, "", comments[{4, top}].leading);
  out.header << "struct TrainConfigFields {\n";
  out.fields << banner << "// MT_CONFIG_FIELD(path, member): every scalar and list field of TrainConfig by its text-format\n"
                          "// path; MT_NUMBER_RULE(path, member, rule): the values each number takes.\n";
  out.flags << banner << "// MT_STEP_FLAG(name, default, help, kind, path, member, enum values): the step flags (train,\n"
                         "// dump, check) that set a TrainConfig field as it is.\n";
  EmitMessage(out, top, "  ", "");
  out.header << "};\n\n}  // namespace v1\n}  // namespace mixtrain\n";
  const std::string dir = argv[2];
  bool ok = Sync(dir + "/include/mixtrain/train_config_fields.h", out.header.str(), write);
  ok = Sync(dir + "/api/train_config_fields.inc", out.fields.str(), write) && ok;
  ok = Sync(dir + "/tools/step_flags_fields.inc", out.flags.str(), write) && ok;
  return ok ? 0 : 1;
}
