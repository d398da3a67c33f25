#include "runtime/trainer.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/text_format.h"
#include "graph/atomic_file.h"
#include "graph/check.h"
#include "graph/external_data.h"
#include "kernels/cpu/dnnl_common.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "graph/shape_inference.h"
#include "passes/pipeline.h"
#include "passes/passes.h"
#include "passes/precision.h"
#include "passes/training.h"

namespace mixtrain {
namespace {

constexpr double kPi = 3.14159265358979323846;

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

uint64_t Fnv1a(uint64_t h, std::string_view bytes) {
  for (char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

std::string ParamText(const pb::ParamSignature& p) {
  absl::StatusOr<DType> t = FromOnnxType(p.dtype());
  return absl::StrCat(t.ok() ? DTypeName(*t) : absl::StrCat("onnx type ", p.dtype()), "[",
                      absl::StrJoin(p.dims(), ","), "]");
}

// The trainable parameters (name, dtype, dims) and the prepared graph's op types, hashed.
pb::ModelSignature SignModel(const Graph& model, const std::vector<std::string>& params) {
  pb::ModelSignature sig;
  uint64_t h = 0xcbf29ce484222325ull;
  for (const std::string& name : params) {
    const Value* v = model.FindValue(name);
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

// Config fields a resumed run may change: where the model and the data come from (the model
// itself is checked by its signature), the run's length (the schedule keeps the saved horizon) and
// the device. Every other field shapes the trajectory and must be equal.
bool MayDiffer(const std::string& field) {
  static const absl::flat_hash_set<std::string> kFields = {
      "model", "steps", "epochs", "device", "data.path", "data.dataset", "data.labels_key",
      "debug_precision"};
  return kFields.contains(field);
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

// "optimizer.kind is ADAM in the checkpoint, ADAMW in this run" for every differing field (unset
// fields count as their default).
void ConfigDifferences(const google::protobuf::Message& saved, const google::protobuf::Message& mine,
                       const std::string& prefix, std::vector<std::string>& out,
                       const char* saved_where = "in the checkpoint", const char* mine_where = "in this run") {
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
    if (a != b) out.push_back(absl::StrCat(name, " is ", a, " ", saved_where, ", ", b, " ", mine_where));
  }
}

std::string PrecisionText(const ResolvedPrecision& p) {
  return absl::StrCat(PrecisionPresetName(p.preset), "/", DTypeName(p.low), ", loss scaling ", p.scaling);
}


}  // namespace

std::vector<StepNodeTime> Trainer::Profile() const {
  std::vector<StepNodeTime> out;
  for (const NodeProfile& p : train_->ProfileByNode())
    out.push_back({p.node, PhaseOf(*p.node), p.calls, p.seconds, p.allocations, p.flops, p.bytes});
  return out;
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const std::string& model_path,
                                                         const pb::TrainConfig& config,
                                                         std::shared_ptr<Communicator> communicator) {
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(model_path));
  return CreateFromGraph(std::move(g), config, std::move(communicator));
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::CreateFromBytes(const std::string& bytes,
                                                                  const pb::TrainConfig& config,
                                                                  std::shared_ptr<Communicator> communicator) {
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxBytes(bytes, "."));
  return CreateFromGraph(std::move(g), config, std::move(communicator));
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::CreateFromGraph(std::unique_ptr<Graph> model,
                                                                  const pb::TrainConfig& config,
                                                                  std::shared_ptr<Communicator> communicator) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->config_ = config;
  t->total_steps_ = config.steps();
  if (config.data_parallel()) {
    if (communicator == nullptr) {
      MT_ASSIGN_OR_RETURN(communicator, Communicator::MpiWorld());
    }
    t->comm_ = std::move(communicator);
  } else if (communicator != nullptr) {
    return absl::InvalidArgumentError("a communicator was given but data_parallel is off");
  }
  MT_RETURN_IF_ERROR(t->Build(std::move(model)));
  return t;
}

absl::Status Trainer::CheckRanksAgree() const {
  // Each rank's model signature and config hashes, gathered everywhere; on a mismatch every rank
  // compares its config with rank 0's field by field, so each reports the same thing.
  pb::TrainConfig mine = config_;
  for (const char* f : {"model", "data", "steps", "epochs", "device", "debug_precision"})
    mine.GetReflection()->ClearField(&mine, mine.GetDescriptor()->FindFieldByName(f));
  std::string bytes;
  mine.SerializeToString(&bytes);
  const int k = comm_->size();
  const uint64_t hashes[2] = {signature_.hash(), Fnv1a(0xcbf29ce484222325ull, bytes)};
  std::vector<uint64_t> all(2 * static_cast<size_t>(k));
  MT_RETURN_IF_ERROR(comm_->AllGather(hashes, sizeof hashes, all.data()));
  std::vector<std::string> why;
  for (int r = 1; r < k; ++r) {
    if (all[2 * r] != all[0]) why.push_back(absl::StrCat("rank ", r, "'s model differs from rank 0's"));
    if (all[2 * r + 1] != all[1]) why.push_back(absl::StrCat("rank ", r, "'s config differs from rank 0's"));
  }
  if (why.empty()) return absl::OkStatus();
  // Name the fields: every config (padded to the longest) to everyone, and the first one that
  // differs compared with rank 0's, so every rank reports the same.
  std::vector<uint64_t> sizes(k);
  const uint64_t size = bytes.size();
  MT_RETURN_IF_ERROR(comm_->AllGather(&size, sizeof size, sizes.data()));
  const uint64_t longest = *std::max_element(sizes.begin(), sizes.end());
  std::string padded = bytes;
  padded.resize(longest);
  std::string gathered(longest * k, '\0');
  MT_RETURN_IF_ERROR(comm_->AllGather(padded.data(), longest, gathered.data()));
  for (int r = 1; r < k; ++r) {
    if (all[2 * r + 1] == all[1]) continue;
    pb::TrainConfig first, other;
    if (first.ParseFromString(gathered.substr(0, sizes[0])) &&
        other.ParseFromString(gathered.substr(longest * r, sizes[r]))) {
      std::vector<std::string> diffs;
      const std::string where = absl::StrCat("on rank ", r);
      ConfigDifferences(first, other, "", diffs, "on rank 0", where.c_str());
      if (!diffs.empty()) why.push_back(absl::StrJoin(diffs, "; "));
    }
    break;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "data parallel: the ranks must train the same model with the same config: ", absl::StrJoin(why, "; "),
      " (this is rank ", comm_->rank(), " of ", k, ")"));
}

absl::Status Trainer::Build(std::unique_ptr<Graph> model) {
  const pb::TrainConfig& c = config_;
  if (c.device() != "cpu" && c.device() != "auto")
    return absl::UnimplementedError(absl::StrCat("device '", c.device(),
                                                 "': this build trains on the CPU only"));
  MT_ASSIGN_OR_RETURN(TrainingRecipe recipe, ResolveTrainingRecipe(c, *model, dnnl_util::NativeBf16()));
  precision_.preset = recipe.preset;
  precision_.low = recipe.low;
  precision_.scaling = !recipe.scaling ? "off" : recipe.dynamic_scaling ? "dynamic" : "static";
  if (!recipe.note.empty())
    precision_.note = absl::StrCat(recipe.note, " (oneDNN ISA ", dnnl_util::DnnlIsaName(), ")");

  // --- names ---
  for (Value* v : model->inputs())
    if (!v->is_initializer()) {
      input_name_ = v->name;
      break;
    }
  output_name_ = recipe.loss.output;
  labels_name_ = recipe.loss.labels;
  classification_ = c.loss() == "cross_entropy";

  // --- one canonical model for the step, the eval graph and the export ---
  MT_RETURN_IF_ERROR(PrepareModel(*model, recipe));
  model_ = model->Clone();

  // --- the training step ---
  std::unique_ptr<Graph> g = model->Clone();
  if (comm_ != nullptr) {
    // Dropout draws differ between ranks (as they do between a batch's examples in one process).
    recipe.train_mode.seed += static_cast<int64_t>(comm_->rank()) * 0x9E3779B9;
  }
  MT_ASSIGN_OR_RETURN(params_, BuildTrainingStep(*g, recipe));
  signature_ = SignModel(*model_, params_);
  if (comm_ != nullptr) MT_RETURN_IF_ERROR(CheckRanksAgree());
  SessionOptions so;
  so.communicator = comm_;
  for (const auto& [from, to] : StateUpdates(*g)) {
    so.state_updates[from] = to;
    state_names_.push_back(to);
  }
  train_graph_ = std::shared_ptr<Graph>(g.release());
  MT_ASSIGN_OR_RETURN(train_, Session::Create(std::const_pointer_cast<const Graph>(train_graph_), so));
  if (recipe.debug_precision) {
    MT_ASSIGN_OR_RETURN(debugger_, PrecisionDebugger::Create(*train_graph_));
  }

  // --- the eval graph: inference form, same loss and precision ---
  std::unique_ptr<Graph> e = model->Clone();
  MT_RETURN_IF_ERROR(BuildEvalGraph(*e, recipe));
  eval_graph_ = std::shared_ptr<Graph>(e.release());
  MT_ASSIGN_OR_RETURN(eval_, Session::Create(std::const_pointer_cast<const Graph>(eval_graph_)));
  return absl::OkStatus();
}

float Trainer::LearningRate(int64_t update) const {
  const pb::ScheduleConfig& s = config_.schedule();
  double base = config_.optimizer().lr();
  int64_t warm = s.warmup_steps();
  if (warm > 0 && update < warm) return static_cast<float>(base * (update + 1) / warm);
  int64_t t = update - warm;
  switch (s.kind()) {
    case pb::ScheduleConfig::CONSTANT: return static_cast<float>(base);
    case pb::ScheduleConfig::STEP:
      return static_cast<float>(base * std::pow(s.gamma(), t / std::max(1, s.step_size())));
    case pb::ScheduleConfig::COSINE: {
      // The run's length in updates (accumulate Step() calls make one update).
      int64_t updates = (total_steps_ + config_.accumulate() - 1) / config_.accumulate();
      int64_t total = std::max<int64_t>(1, updates - warm);
      double frac = std::min(1.0, static_cast<double>(t) / total);
      return static_cast<float>(s.min_lr() + (base - s.min_lr()) * 0.5 * (1 + std::cos(kPi * frac)));
    }
  }
  return static_cast<float>(base);
}

absl::StatusOr<StepResult> Trainer::Step(const std::map<std::string, Tensor>& batch, bool read_loss) {
  // Data parallel: the loss is averaged over the ranks by a collective every rank must make, so
  // every step reads it whatever this rank's caller asked (ranks log at different steps).
  if (comm_ != nullptr) read_loss = true;
  for (const auto& [name, t] : batch)
    if (t.rank() > 0 && t.dims()[0] == 0)
      return absl::InvalidArgumentError(absl::StrCat("batch array '", name, "' has no examples"));
  StepResult r;
  int64_t acc = config_.accumulate();
  int64_t update = calls_ / acc;
  bool apply = (calls_ + 1) % acc == 0;
  r.lr = LearningRate(update);
  std::map<std::string, Tensor> feeds;
  for (Value* in : train_graph_->inputs()) {
    if (in->is_initializer()) continue;
    if (in->name == kLrName) {
      feeds.emplace(kLrName, Tensor::Scalar(r.lr));
    } else if (in->name == kApplyName) {
      Tensor a(DType::kBool, {});
      a.data_as<uint8_t>()[0] = apply;
      feeds.emplace(kApplyName, a);
    } else {
      auto it = batch.find(in->name);
      if (it == batch.end())
        return absl::InvalidArgumentError(absl::StrCat("the batch has no '", in->name, "' array"));
      feeds.emplace(in->name, it->second);
    }
  }
  const int64_t every = config_.debug_precision();
  const bool gather = debugger_ != nullptr && calls_ % every == 0;
  if ((read_loss || debugger_ != nullptr) && precision_.scaling != "off") {
    MT_ASSIGN_OR_RETURN(Tensor s, train_->GetInitializer(kLossScaleName));
    r.loss_scale = s.data_as<float>()[0];
  }
  std::vector<std::string> fetch = {kFoundInfName};
  if (read_loss) fetch.push_back(kLossName);
  if (gather) fetch.push_back(kPrecisionStatsName);
  MT_ASSIGN_OR_RETURN(std::vector<Tensor> out, train_->Run(feeds, fetch));
  r.skipped = out[0].data_as<uint8_t>()[0] != 0;
  r.loss = read_loss ? static_cast<float>(out[1].GetDouble(0)) : std::numeric_limits<float>::quiet_NaN();
  if (read_loss && comm_ != nullptr && comm_->size() > 1) {
    MT_RETURN_IF_ERROR(comm_->AllReduceSum(&r.loss, 1, config_.deterministic()));
    r.loss /= static_cast<float>(comm_->size());
  }
  if (gather || (debugger_ != nullptr && r.skipped)) {
    Tensor stats;
    if (gather) {
      stats = out.back();
    } else {
      MT_ASSIGN_OR_RETURN(stats, RerunForStatistics(feeds, r.loss_scale));
    }
    auto init = [&](const std::string& name) { return train_->GetInitializer(name); };
    MT_ASSIGN_OR_RETURN(r.nonfinite, debugger_->Record(stats, calls_ + 1, r.skipped, init));
    r.precision_gathered = true;
  }
  ++calls_;
  eval_stale_ = true;
  return r;
}

absl::StatusOr<Tensor> Trainer::RerunForStatistics(const std::map<std::string, Tensor>& feeds, float loss_scale) {
  // The step just run, again, as a dry run (no state written): the same batch, the loss scale it
  // used (a dynamic scaler has backed off since) and the same random draws (dropout).
  const uint64_t runs = train_->run_count();
  std::optional<Tensor> scale_after;
  if (precision_.scaling != "off") {
    MT_ASSIGN_OR_RETURN(scale_after, train_->GetInitializer(kLossScaleName));
    MT_RETURN_IF_ERROR(train_->SetInitializer(kLossScaleName, Tensor::Scalar(loss_scale)));
  }
  train_->set_run_count(runs - 1);
  absl::StatusOr<std::vector<Tensor>> out = train_->Run(feeds, {kPrecisionStatsName}, /*write_state=*/false);
  train_->set_run_count(runs);
  if (scale_after) MT_RETURN_IF_ERROR(train_->SetInitializer(kLossScaleName, *scale_after));
  if (!out.ok()) return out.status();
  return (*out)[0];
}

absl::Status Trainer::SyncEval() {
  if (!eval_stale_) return absl::OkStatus();
  for (const Value* v : eval_graph_->initializers()) {
    if (std::find(state_names_.begin(), state_names_.end(), v->name) == state_names_.end()) continue;
    MT_ASSIGN_OR_RETURN(Tensor t, train_->GetInitializer(v->name));
    MT_RETURN_IF_ERROR(eval_->SetInitializer(v->name, t));
  }
  eval_stale_ = false;
  return absl::OkStatus();
}

absl::StatusOr<EvalResult> Trainer::Evaluate(const std::map<std::string, Tensor>& batch) {
  MT_RETURN_IF_ERROR(SyncEval());
  std::map<std::string, Tensor> feeds;
  for (Value* in : eval_graph_->inputs()) {
    if (in->is_initializer()) continue;
    auto it = batch.find(in->name);
    if (it == batch.end())
      return absl::InvalidArgumentError(absl::StrCat("the batch has no '", in->name, "' array"));
    feeds.emplace(in->name, it->second);
  }
  MT_ASSIGN_OR_RETURN(std::vector<Tensor> out, eval_->Run(feeds, {kLossName, output_name_}));
  EvalResult r;
  const Tensor& logits = out[1];
  r.examples = logits.rank() > 0 ? logits.dims()[0] : 1;
  r.loss_sum = out[0].GetDouble(0) * static_cast<double>(r.examples);
  if (classification_ && logits.rank() == 2 && batch.contains(labels_name_)) {
    const Tensor& labels = batch.at(labels_name_);
    int64_t n = logits.dims()[0], k = logits.dims()[1];
    for (int64_t i = 0; i < n; ++i) {
      int64_t best = 0;
      for (int64_t j = 1; j < k; ++j)
        if (logits.GetDouble(i * k + j) > logits.GetDouble(i * k + best)) best = j;
      r.correct += best == labels.GetInt(i);
    }
  }
  return r;
}

absl::StatusOr<Tensor> Trainer::GetParameter(const std::string& name) const {
  return train_->GetInitializer(name);
}

absl::Status Trainer::SetParameter(const std::string& name, const Tensor& value) {
  MT_RETURN_IF_ERROR(train_->SetInitializer(name, value));
  eval_stale_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, Tensor>> Trainer::State() const {
  std::map<std::string, Tensor> s;
  for (const std::string& n : state_names_) {
    MT_ASSIGN_OR_RETURN(Tensor t, train_->GetInitializer(n));
    s.emplace(n, std::move(t));
  }
  return s;
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

absl::Status Trainer::SaveCheckpoint(const std::string& path, int64_t epoch, int64_t batch) const {
  if (epoch < 0 || batch < 0)
    return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path, "': position epoch ", epoch,
                                                   ", batch ", batch, " is negative"));
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
  MT_ASSIGN_OR_RETURN(auto state, State());
  for (const auto& [name, t] : state) {
    onnx::TensorProto* p = ck.add_state();
    TensorToProto(t, p);
    p->set_name(name);
  }
  ck.set_world_size(world_size());
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

absl::StatusOr<std::pair<int64_t, int64_t>> Trainer::LoadCheckpoint(const std::string& path) {
  absl::StatusOr<std::pair<int64_t, int64_t>> r = LoadCheckpointHere(path);
  MT_RETURN_IF_ERROR(AgreeOnSuccess(r.status(), absl::StrCat("loading checkpoint '", path, "'")));
  return r;
}

absl::StatusOr<std::pair<int64_t, int64_t>> Trainer::LoadCheckpointHere(const std::string& path) {
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
  MT_ASSIGN_OR_RETURN(pb::Checkpoint ck, DecodeCheckpoint(bytes, path));
  auto refuse = [&](auto&&... why) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path, "': ", why...));
  };

  // --- counters ---
  for (auto [field, v] : {std::pair<const char*, int64_t>{"step", ck.step()}, {"epoch", ck.epoch()},
                          {"batch_in_epoch", ck.batch_in_epoch()}, {"planned_steps", ck.planned_steps()}})
    if (v < 0) return refuse("field ", field, " is ", v, " (must be >= 0)");
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
    if (!loaded.contains(n)) return refuse("lacks state '", n, "'");
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
  for (const char* counter : {kStepName, kGoodStepsName})
    if (auto it = loaded.find(counter); it != loaded.end() && it->second.GetInt(0) < 0)
      return refuse("state '", counter, "' is ", it->second.GetInt(0), " (must be >= 0)");
  if (auto it = loaded.find(kStepName); it != loaded.end() && it->second.GetInt(0) > ck.step())
    return refuse("state '", kStepName, "' counts ", it->second.GetInt(0), " updates in ", ck.step(), " steps");

  // --- apply: every check passed, so nothing below fails on the checkpoint's account ---
  for (const auto& [n, t] : loaded) MT_CHECK_OK(train_->SetInitializer(n, t));
  calls_ = ck.step();
  total_steps_ = ck.planned_steps();
  train_->set_run_count(ck.rng_offset());
  eval_stale_ = true;
  return std::make_pair(ck.epoch(), ck.batch_in_epoch());
}

absl::Status Trainer::ExportInferenceModel(const std::string& path, DType dtype) const {
  std::unique_ptr<Graph> g = model_->Clone();
  for (Value* v : std::vector<Value*>(g->initializers().begin(), g->initializers().end())) {
    if (std::find(state_names_.begin(), state_names_.end(), v->name) == state_names_.end()) continue;
    MT_ASSIGN_OR_RETURN(Tensor t, train_->GetInitializer(v->name));
    g->SetInitializer(v, t);
  }
  MT_RETURN_IF_ERROR(LowerForExport(*g, dtype));
  return SaveOnnxFile(*g, path);
}

}  // namespace mixtrain
