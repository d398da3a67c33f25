// Trainer checkpoints (runtime/trainer.h): the file format (magic, version, length, payload,
// CRC-32), saving and loading with the checks that name what differs, and the model signature
// and config comparison that the data-parallel start-up check shares (trainer_checkpoint.h).
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/text_format.h"
#include "graph/atomic_file.h"
#include "graph/check.h"
#include "graph/external_data.h"  // TensorToProto, TensorFromProto
#include "runtime/trainer.h"
#include "runtime/trainer_checkpoint.h"

namespace mixtrain {
namespace {

// --- checkpoint helpers ----------------------------------------------------------------------

constexpr char kCheckpointMagic[] = "MXTRCKPT";
constexpr size_t kMagicSize = 8;
constexpr size_t kHeaderSize = kMagicSize + 4 + 8;  // magic, version, payload length
constexpr size_t kTrailerSize = 4;                  // CRC-32

void PutLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLe(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

uint32_t Crc32(std::string_view bytes) {
  return static_cast<uint32_t>(
      crc32_z(crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

std::string ParamText(const pb::ParamSignature& p) {
  absl::StatusOr<DType> t = FromOnnxType(p.dtype());
  return absl::StrCat(t.ok() ? DTypeName(*t) : absl::StrCat("onnx type ", p.dtype()), "[",
                      absl::StrJoin(p.dims(), ","), "]");
}

// Why a checkpoint's model is not this one, in a few words ("" when the signatures are equal).
std::string ModelDifference(const pb::ModelSignature& saved, const pb::ModelSignature& mine) {
  if (saved.hash() == mine.hash()) return "";
  std::vector<std::string> diffs;
  std::map<std::string, const pb::ParamSignature*> theirs;
  for (const auto& p : saved.params()) theirs[p.name()] = &p;
  for (const auto& p : mine.params()) {
    auto it = theirs.find(p.name());
    if (it == theirs.end()) {
      diffs.push_back(absl::StrCat("parameter '", p.name(), "' is not in the checkpoint's model"));
      continue;
    }
    if (ParamText(*it->second) != ParamText(p))
      diffs.push_back(absl::StrCat("parameter '", p.name(), "' is ", ParamText(*it->second),
                                   " in the checkpoint's model, ", ParamText(p), " in this one"));
    theirs.erase(it);
  }
  for (const auto& [name, p] : theirs)
    diffs.push_back(absl::StrCat("the checkpoint's model has parameter '", name, "' this one lacks"));
  if (diffs.empty()) {
    int n = std::min(saved.op_types_size(), mine.op_types_size());
    int i = 0;
    while (i < n && saved.op_types(i) == mine.op_types(i)) ++i;
    if (i < n)
      diffs.push_back(absl::StrCat("node #", i, " is ", saved.op_types(i), " in the checkpoint's model, ",
                                   mine.op_types(i), " in this one"));
    else
      diffs.push_back(absl::StrCat("the checkpoint's model has ", saved.op_types_size(), " nodes, this one ",
                                   mine.op_types_size()));
  }
  constexpr size_t kShown = 3;
  std::string more = diffs.size() > kShown ? absl::StrCat(" (and ", diffs.size() - kShown, " more)") : "";
  diffs.resize(std::min(diffs.size(), kShown));
  return absl::StrCat(absl::StrJoin(diffs, "; "), more);
}

// Config fields a resumed run may change: those the proto marks (resume_may_differ: where the
// model and the data come from, the model itself being checked by its signature; the run's
// length, the schedule keeping the saved horizon; the device; how the CLI runs around the step,
// `run`). Every other field shapes the trajectory and must be equal.
bool MayDiffer(const std::string& field) {
  const google::protobuf::Descriptor* d = pb::TrainConfig::descriptor();
  for (absl::string_view part : absl::StrSplit(field, '.')) {
    const google::protobuf::FieldDescriptor* f = d == nullptr ? nullptr : d->FindFieldByName(std::string(part));
    if (f == nullptr) return false;
    if (f->options().GetExtension(pb::resume_may_differ)) return true;  // `run` is marked whole
    d = f->message_type();
  }
  return false;
}

// A low dtype of AUTO on one side matches any on the other: what it resolved to is compared
// apart (Checkpoint.precision), so `--dtype=auto` resumes a bf16 run where auto means bf16.
bool AutoMatches(const std::string& field, const std::string& a, const std::string& b) {
  return field == "precision.low_dtype" && (a == "AUTO" || b == "AUTO");
}

std::string FieldText(const google::protobuf::Message& m, const google::protobuf::FieldDescriptor* f) {
  std::string out, one;
  if (!f->is_repeated()) {
    google::protobuf::TextFormat::PrintFieldValueToString(m, f, -1, &out);
    return out;
  }
  int n = m.GetReflection()->FieldSize(m, f);
  for (int i = 0; i < n; ++i) {
    google::protobuf::TextFormat::PrintFieldValueToString(m, f, i, &one);
    absl::StrAppend(&out, i ? ", " : "", one);
  }
  return absl::StrCat("[", out, "]");
}

std::string PrecisionText(const ResolvedPrecision& p) {
  return absl::StrCat(PrecisionPresetName(p.preset), "/", DTypeName(p.low), ", loss scaling ", p.scaling);
}

}  // namespace

uint64_t Fnv1a(uint64_t h, std::string_view bytes) {
  for (char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

// The trainable parameters (name, dtype, dims) and the prepared graph's op types, hashed.
pb::ModelSignature SignModel(const Graph& model, const Graph& step, const std::vector<std::string>& params) {
  pb::ModelSignature sig;
  uint64_t h = 0xcbf29ce484222325ull;
  for (const std::string& name : params) {
    const Value* v = step.FindValue(name);
    MT_CHECK(v && v->is_initializer()) << "trained parameter '" << name << "' is no initializer";
    pb::ParamSignature* p = sig.add_params();
    p->set_name(name);
    p->set_dtype(ToOnnxType(v->initializer->dtype()));
    for (int64_t d : v->initializer->dims()) p->add_dims(d);
    h = Fnv1a(h, absl::StrCat(name, " ", ParamText(*p), "\n"));
  }
  for (const auto& n : model.nodes()) {
    sig.add_op_types(n->op_type());
    h = Fnv1a(h, absl::StrCat(n->domain(), ":", n->op_type(), "\n"));
  }
  sig.set_hash(h);
  return sig;
}

// "optimizer.kind is ADAM in the checkpoint, ADAMW in this run" for every differing field (unset
// fields count as their default).
void ConfigDifferences(const google::protobuf::Message& saved, const google::protobuf::Message& mine,
                       const std::string& prefix, std::vector<std::string>& out,
                       const char* saved_where, const char* mine_where) {
  const google::protobuf::Descriptor* d = mine.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    std::string name = prefix + f->name();
    if (MayDiffer(name)) continue;
    if (!f->is_repeated() && f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      ConfigDifferences(saved.GetReflection()->GetMessage(saved, f), mine.GetReflection()->GetMessage(mine, f),
                        name + ".", out, saved_where, mine_where);
      continue;
    }
    std::string a = FieldText(saved, f), b = FieldText(mine, f);
    if (a != b && !AutoMatches(name, a, b)) out.push_back(absl::StrCat(name, " is ", a, " ", saved_where, ", ", b, " ", mine_where));
  }
}

// --- checkpoints ---------------------------------------------------------------------------------

absl::StatusOr<std::string> EncodeCheckpoint(const pb::Checkpoint& ck) {
  std::string payload;
  if (!ck.SerializeToString(&payload))
    return absl::ResourceExhaustedError("the checkpoint does not serialize (over protobuf's 2 GiB?)");
  std::string out(kCheckpointMagic, kMagicSize);
  PutLe(out, kCheckpointVersion, 4);
  PutLe(out, payload.size(), 8);
  out += payload;
  PutLe(out, Crc32(out), 4);
  return out;
}

absl::StatusOr<pb::Checkpoint> DecodeCheckpoint(std::string_view bytes, const std::string& path) {
  auto bad = [&](auto&&... what) {
    return absl::DataLossError(absl::StrCat("checkpoint '", path, "': ", what...));
  };
  if (bytes.empty()) return bad("the file is empty (truncated)");
  std::string_view magic(kCheckpointMagic, kMagicSize);
  size_t m = std::min(bytes.size(), kMagicSize);
  if (bytes.substr(0, m) != magic.substr(0, m))
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' is not a mixtrain checkpoint (no ", std::string(magic),
        " header; checkpoints written before format version 1 are not accepted, re-create them)"));
  if (bytes.size() < kHeaderSize + kTrailerSize)
    return bad("truncated: ", bytes.size(), " bytes, shorter than the frame alone");
  uint64_t len = GetLe(bytes, kMagicSize + 4, 8);
  uint64_t body = bytes.size() - kHeaderSize - kTrailerSize;
  if (len != body)
    return bad("size mismatch: the header says ", len, " payload bytes, the file holds ", body,
               " (truncated or corrupt)");
  uint32_t stored = static_cast<uint32_t>(GetLe(bytes, kHeaderSize + len, 4));
  if (Crc32(bytes.substr(0, kHeaderSize + len)) != stored) return bad("checksum mismatch (the file is corrupt)");
  uint64_t version = GetLe(bytes, kMagicSize, 4);
  if (version != kCheckpointVersion)
    return bad("format version ", version, "; this build reads version ", kCheckpointVersion);
  pb::Checkpoint ck;
  if (len > static_cast<uint64_t>(std::numeric_limits<int>::max()) ||
      !ck.ParseFromArray(bytes.data() + kHeaderSize, static_cast<int>(len)))
    return bad("the payload is no Checkpoint message");
  return ck;
}

absl::Status Trainer::SaveCheckpoint(const std::string& path, const CheckpointPosition& position) const {
  const int64_t epoch = position.epoch, batch = position.batch;
  if (epoch < 0 || batch < 0 || position.best_eval_step < 0 || position.evals_since_best < 0)
    return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path, "': position epoch ", epoch, ", batch ",
                                                   batch, ", best evaluation at step ", position.best_eval_step,
                                                   ", evaluations since ", position.evals_since_best,
                                                   ": none may be negative"));
  pb::Checkpoint ck;
  ck.set_step(calls_);
  ck.set_rng_offset(train_->run_count());  // Dropout masks are drawn from (seed, run count)
  ck.set_epoch(epoch);
  ck.set_batch_in_epoch(batch);
  ck.set_rng_seed(config_.data().seed());
  ck.set_planned_steps(total_steps_);
  ck.set_precision(PrecisionText(precision_));
  *ck.mutable_config() = config_;
  *ck.mutable_model() = signature_;
  // In State()'s order (by name), each read where it lives: no copy of the whole state.
  std::vector<std::string> names = state_names_;
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    MT_ASSIGN_OR_RETURN(Tensor t, train_->InitializerContents(name));
    onnx::TensorProto* p = ck.add_state();
    TensorToProto(t, p);
    p->set_name(name);
  }
  ck.set_world_size(world_size());
  if (position.best_eval_loss) {
    ck.set_best_eval_loss(*position.best_eval_loss);
    ck.set_best_eval_step(position.best_eval_step);
    ck.set_evals_since_best(position.evals_since_best);
  }
  absl::Status written = absl::OkStatus();
  if (rank() == 0) {
    absl::StatusOr<std::string> bytes = EncodeCheckpoint(ck);
    written = bytes.ok() ? WriteFileAtomically(path, *bytes)
                         : absl::Status(bytes.status().code(),
                                        absl::StrCat("checkpoint '", path, "': ", bytes.status().message()));
  }
  return AgreeOnSuccess(written, absl::StrCat("writing checkpoint '", path, "'"));
}

absl::Status Trainer::AgreeOnSuccess(const absl::Status& mine, const std::string& what) const {
  if (comm_ == nullptr || comm_->size() == 1) return mine;
  float failed = mine.ok() ? 0.0f : 1.0f;
  MT_RETURN_IF_ERROR(comm_->AllReduceSum(&failed, 1, /*fixed_order=*/true));
  if (!mine.ok()) return mine;
  if (failed > 0)
    return absl::AbortedError(absl::StrCat(what, " failed on ", static_cast<int>(failed), " of ",
                                           comm_->size(), " ranks (see their errors)"));
  return absl::OkStatus();
}

absl::StatusOr<CheckpointPosition> Trainer::LoadCheckpointPosition(const std::string& path) {
  absl::StatusOr<CheckpointPosition> r = LoadCheckpointHere(path);
  MT_RETURN_IF_ERROR(AgreeOnSuccess(r.status(), absl::StrCat("loading checkpoint '", path, "'")));
  return r;
}

absl::StatusOr<pb::Checkpoint> ReadCheckpointFile(const std::string& path) {
  std::string bytes;
  {
    // A FIFO would block the read forever, a folder reads as an error: name them instead.
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path, "' is not a regular file"));
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f)
      return absl::NotFoundError(absl::StrCat("cannot open checkpoint '", path, "': ", std::strerror(errno)));
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.append(buf, n);
    bool failed = std::ferror(f);
    std::fclose(f);
    if (failed) return absl::DataLossError(absl::StrCat("cannot read checkpoint '", path, "'"));
  }
  return DecodeCheckpoint(bytes, path);
}

absl::StatusOr<CheckpointPosition> Trainer::LoadCheckpointHere(const std::string& path) {
  MT_ASSIGN_OR_RETURN(pb::Checkpoint ck, ReadCheckpointFile(path));
  auto refuse = [&](auto&&... why) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path, "': ", why...));
  };

  // --- counters: the bound of a run's steps (TrainConfig's `steps`, 10^12) holds for each, as a
  // CRC-valid file may still carry any int64 ---
  constexpr int64_t kMaxSteps = 1000000000000;
  for (auto [field, v] : {std::pair<const char*, int64_t>{"step", ck.step()}, {"epoch", ck.epoch()},
                          {"batch_in_epoch", ck.batch_in_epoch()}, {"planned_steps", ck.planned_steps()},
                          {"best_eval_step", ck.best_eval_step()}, {"evals_since_best", ck.evals_since_best()}})
    if (v < 0 || v > kMaxSteps) return refuse("field ", field, " is ", v, " (must be in [0, ", kMaxSteps, "])");
  if (ck.world_size() != world_size())
    return refuse("saved by a run of ", ck.world_size(), " data-parallel rank(s), this run has ", world_size(),
                  " (resume with the same number of ranks)");

  // --- the run it continues: config, resolved precision, model ---
  std::vector<std::string> diffs;
  ConfigDifferences(ck.config(), config_, "", diffs);
  if (!diffs.empty())
    return refuse("made with another config: ", absl::StrJoin(diffs, "; "));
  if (ck.precision() != PrecisionText(precision_))
    return refuse("made with precision ", ck.precision(), ", this run resolves to ", PrecisionText(precision_),
                  " (a low dtype of auto resolves by CPU: set it explicitly)");
  if (std::string why = ModelDifference(ck.model(), signature_); !why.empty())
    return refuse("made for another model: ", why);

  // --- state: exactly this trainer's tensors, each of its dtype and shape ---
  std::map<std::string, Tensor> loaded;
  for (const onnx::TensorProto& p : ck.state()) {
    MT_ASSIGN_OR_RETURN(Tensor t,
                        TensorFromProto(p, "", absl::StrCat("checkpoint '", path, "' tensor '", p.name(), "'")));
    if (!loaded.emplace(p.name(), std::move(t)).second) return refuse("state '", p.name(), "' appears twice");
  }
  for (const std::string& n : state_names_)
    // The skip counter came later than the first checkpoints: one without it resumes counting at 0.
    if (!loaded.contains(n) && n != kSkippedStepsName) return refuse("lacks state '", n, "'");
  for (const auto& [n, t] : loaded) {
    const Value* v = std::find(state_names_.begin(), state_names_.end(), n) != state_names_.end()
                         ? train_graph_->FindValue(n) : nullptr;
    if (!v || !v->is_initializer()) return refuse("has state '", n, "' this trainer does not keep");
    const Tensor& want = *v->initializer;
    if (t.dtype() != want.dtype() || t.dims() != want.dims())
      return refuse("state '", n, "' is ", DTypeName(t.dtype()), "[", absl::StrJoin(t.dims(), ","),
                    "], this trainer's is ", DTypeName(want.dtype()), "[", absl::StrJoin(want.dims(), ","), "]");
  }
  if (auto it = loaded.find(kLossScaleName); it != loaded.end()) {
    double s = it->second.GetDouble(0);
    if (!std::isfinite(s) || s <= 0) return refuse("loss scale ", s, " (must be finite and > 0)");
  }
  for (const char* counter : {kStepName, kGoodStepsName, kSkippedStepsName})
    if (auto it = loaded.find(counter); it != loaded.end() && it->second.GetInt(0) < 0)
      return refuse("state '", counter, "' is ", it->second.GetInt(0), " (must be >= 0)");
  if (auto it = loaded.find(kStepName); it != loaded.end() && it->second.GetInt(0) > ck.step())
    return refuse("state '", kStepName, "' counts ", it->second.GetInt(0), " updates in ", ck.step(), " steps");

  // --- apply: every check passed, so nothing below fails on the checkpoint's account ---
  for (const auto& [n, t] : loaded) MT_CHECK_OK(train_->SetInitializer(n, t));
  if (!loaded.contains(kSkippedStepsName) && train_graph_->FindValue(kSkippedStepsName) != nullptr)
    MT_CHECK_OK(train_->SetInitializer(kSkippedStepsName, Tensor::ScalarI64(0)));
  calls_ = ck.step();
  total_steps_ = ck.planned_steps();
  train_->set_run_count(ck.rng_offset());
  eval_stale_ = true;
  CheckpointPosition position{ck.epoch(), ck.batch_in_epoch()};
  if (ck.has_best_eval_loss()) {
    position.best_eval_loss = ck.best_eval_loss();
    position.best_eval_step = ck.best_eval_step();
    position.evals_since_best = ck.evals_since_best();
  }
  return position;
}

}  // namespace mixtrain
