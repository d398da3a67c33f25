// The public TrainConfig mirrors pb::TrainConfig: same defaults, and every field of the message
// (found by walking its descriptor, so a field added to the proto later is covered) survives
// text -> TrainConfig -> text. FromTextProto checks the values it read (the rules themselves are
// tested in validation_test.cc).
#include <string>

#include "gtest/gtest.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "mixtrain/train_config.h"
#include "proto/mixtrain_pb.h"

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Sets every field of `m` (recursively) to a valid value other than its default (floats move
// toward the middle of their range: a beta stays below 1, a growth factor above 1).
void SetEveryField(Message* m) {
  const Reflection* r = m->GetReflection();
  const google::protobuf::Descriptor* d = m->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->message_type() != nullptr && f->message_type()->full_name().rfind("mixtrain.", 0) != 0)
      continue;  // onnx.TensorProto etc. are not part of TrainConfig
    if (f->is_repeated()) {
      ASSERT_EQ(f->cpp_type(), FieldDescriptor::CPPTYPE_STRING) << f->full_name();
      // The precision lists name op types (Validate checks them); fp32_nodes' regexes may too.
      static const char* const kOps[] = {"Gemm", "Conv", "Softmax", "Relu", "Add", "Mul", "MatMul"};
      r->AddString(m, f, kOps[i % 7]);
      r->AddString(m, f, "LayerNormalization");
      continue;
    }
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE: SetEveryField(r->MutableMessage(m, f)); break;
      case FieldDescriptor::CPPTYPE_STRING:
        // device and run.export_dtype take one of three words (Validate); the others are free text.
        r->SetString(m, f, f->name() == "device"         ? std::string("cuda")
                           : f->name() == "export_dtype" ? std::string("bf16")
                                                         : "value_" + f->name());
        break;
      case FieldDescriptor::CPPTYPE_BOOL: r->SetBool(m, f, !f->default_value_bool()); break;
      case FieldDescriptor::CPPTYPE_INT32: r->SetInt32(m, f, f->default_value_int32() + 3); break;
      case FieldDescriptor::CPPTYPE_INT64: r->SetInt64(m, f, f->default_value_int64() + 5); break;
      case FieldDescriptor::CPPTYPE_UINT64: r->SetUInt64(m, f, f->default_value_uint64() + 7); break;
      case FieldDescriptor::CPPTYPE_FLOAT: r->SetFloat(m, f, f->default_value_float() * 0.5f + 0.125f); break;
      case FieldDescriptor::CPPTYPE_ENUM: {
        const auto* e = f->enum_type();
        r->SetEnum(m, f, e->value(e->value_count() - 1));  // the last value; defaults are the first
        break;
      }
      default: FAIL() << "TrainConfig field of an unhandled type: " << f->full_name();
    }
  }
}

TEST(TrainConfigTest, DefaultsMatchTheProto) {
  // Every struct field equal to the proto default prints as nothing.
  EXPECT_EQ(mixtrain::TrainConfig{}.ToTextProto(), "");
  absl::StatusOr<mixtrain::TrainConfig> c = mixtrain::TrainConfig::FromTextProto("");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ToTextProto(), "");
  EXPECT_EQ(c->optimizer.lr, 0.001f);
  EXPECT_EQ(c->data.labels_key, "labels");
}

TEST(TrainConfigTest, EveryProtoFieldRoundTrips) {
  mixtrain::pb::TrainConfig full;
  SetEveryField(&full);
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(full, &text));
  absl::StatusOr<mixtrain::TrainConfig> c = mixtrain::TrainConfig::FromTextProto(text);
  ASSERT_TRUE(c.ok()) << c.status();
  mixtrain::pb::TrainConfig back;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(c->ToTextProto(), &back));
  std::string diff;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(full, back)) << diff;
}

TEST(TrainConfigTest, TypedFieldsReachTheText) {
  mixtrain::TrainConfig c;
  c.optimizer.kind = mixtrain::TrainConfig::Optimizer::Kind::kSgd;
  c.precision.deny = {"Gemm"};
  c.accumulate = 4;
  mixtrain::pb::TrainConfig p;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(c.ToTextProto(), &p));
  EXPECT_EQ(p.optimizer().kind(), mixtrain::pb::OptimizerConfig::SGD);
  ASSERT_EQ(p.precision().deny_size(), 1);
  EXPECT_EQ(p.precision().deny(0), "Gemm");
  EXPECT_EQ(p.accumulate(), 4);
  EXPECT_FALSE(p.has_loss());  // unchanged fields stay unset
}

TEST(TrainConfigTest, OptionalFieldsKeepTheirPresence) {
  // AdamW's weight decay defaults to 0.01 only when unset: an explicit 0 must stay explicit.
  absl::StatusOr<mixtrain::TrainConfig> c =
      mixtrain::TrainConfig::FromTextProto("optimizer { kind: ADAMW weight_decay: 0 }");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->optimizer.weight_decay.has_value());
  EXPECT_FALSE(c->optimizer.epsilon.has_value());
  mixtrain::pb::TrainConfig p;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(c->ToTextProto(), &p));
  EXPECT_TRUE(p.optimizer().has_weight_decay());
  EXPECT_FALSE(p.optimizer().has_epsilon());
}

TEST(TrainConfigTest, BadTextNamesTheLineAndField) {
  absl::StatusOr<mixtrain::TrainConfig> c = mixtrain::TrainConfig::FromTextProto("steps: 3\nno_such_field: 1\n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("line 2"), absl::string_view::npos) << c.status();
  EXPECT_NE(c.status().message().find("no_such_field"), absl::string_view::npos) << c.status();
}

TEST(TrainConfigTest, ValuesReadAreChecked) {
  absl::StatusOr<mixtrain::TrainConfig> c =
      mixtrain::TrainConfig::FromTextProto("optimizer { lr: -1 }\nsteps: 3\n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("optimizer.lr=-1: must be a finite number > 0"), absl::string_view::npos)
      << c.status();
  c = mixtrain::TrainConfig::FromTextProto("data { batch_size: 0 }");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("data.batch_size=0"), absl::string_view::npos) << c.status();
  // The text format reads "inf" and "nan" as floats: refused like any other bad value.
  c = mixtrain::TrainConfig::FromTextProto("loss_scaler { init_scale: inf }");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("loss_scaler.init_scale=inf"), absl::string_view::npos) << c.status();
}

}  // namespace
