// `mixtrain bench MODEL.onnx --batch-size=N [--dtype=fp32|bf16|fp16] [--warmup=5] [--iters=20]
// [--dims=SYM=SIZE,...] [--profile] [--no-optimize]`: times the forward pass on random inputs and prints the time
// per batch (median, min, max), throughput and the planned peak memory; --profile adds the
// kernel time per op type. --train times the training step instead, on random batches or, with
// --data, on a data set's batches as `mixtrain train` reads them.
// Built only on the public API (include/mixtrain/).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/status_macros.h"
#include "tools/cli.h"
#include "tools/memory_report.h"
#include "tools/step_flags.h"
#include "tools/step_profile.h"

namespace mixtrain {
namespace {

// Random contents: floats uniform in [-1, 1); integers 0 or 1 (valid as indices and labels).
absl::StatusOr<HostTensor> RandomTensor(ElementType type, std::vector<int64_t> dims, std::mt19937& rng) {
  const bool low = type == ElementType::kFloat16 || type == ElementType::kBFloat16;
  MIXTRAIN_ASSIGN_OR_RETURN(HostTensor t, HostTensor::Zeros(low ? ElementType::kFloat32 : type, dims));
  std::uniform_real_distribution<float> real(-1.f, 1.f);
  std::uniform_int_distribution<int> bit(0, 1);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    switch (t.type()) {
      case ElementType::kFloat32: t.data<float>()[i] = real(rng); break;
      case ElementType::kFloat64: t.data<double>()[i] = real(rng); break;
      case ElementType::kInt64: t.data<int64_t>()[i] = bit(rng); break;
      case ElementType::kInt32: t.data<int32_t>()[i] = bit(rng); break;
      case ElementType::kBool: break;  // all false
      default: static_cast<uint8_t*>(t.raw_data())[i] = static_cast<uint8_t>(bit(rng)); break;
    }
  }
  return low ? t.ConvertedTo(type) : t;
}

std::string Bytes(size_t n) {
  if (n < (1u << 20)) return absl::StrFormat("%.1f KiB", n / 1024.0);
  return absl::StrFormat("%.2f MiB", n / 1048576.0);
}

// Symbolic dims: by name from --dims, else the batch size for dim 0, else 1.
std::vector<int64_t> ConcreteDims(const TensorInfo& in, int64_t batch, const std::map<std::string, int64_t>& sym) {
  std::vector<int64_t> dims;
  for (size_t d = 0; d < in.shape.size(); ++d) {
    if (in.shape[d] >= 0) dims.push_back(in.shape[d]);
    else if (auto it = sym.find(in.dim_names[d]); it != sym.end()) dims.push_back(it->second);
    else dims.push_back(d == 0 ? batch : 1);
  }
  return dims;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// --train: the whole training step (forward, loss, backward, optimizer) of a Trainer on random
// inputs and labels 0/1, as `mixtrain train` would build it with --dtype and --loss. Every step
// reads its loss back, as a training loop that logs each step does: the loss value itself is not
// needed for the gradients, so without the read the step would skip computing it (the peers in
// tools/bench always compute theirs), and on a GPU the read makes each timed step wait for the
// device instead of timing only the launches.
absl::Status BenchTrain(const cli::Args& args, const std::string& path, int64_t batch, int64_t warmup,
                        int64_t iters, ElementType dtype, const std::map<std::string, int64_t>& sym) {
  // The step `train` builds from the same step flags (--recompute, --optimizer, --lora-rank,
  // --config, ...); bench's --dtype picks the precision (fp32, or AMP in bf16/fp16) unless a
  // --config, --policy or --precision says it and --dtype is not given.
  TrainConfig c;
  using P = TrainConfig::Precision;
  MIXTRAIN_RETURN_IF_ERROR(cli::ApplyStepFlags(args, c, /*dtype_is_callers=*/true));
  if (args.has("dtype") || !(args.has("config") || args.has("policy") || args.has("precision"))) {
    c.precision.preset = dtype == ElementType::kFloat32 ? P::Preset::kFp32 : P::Preset::kAmp;
    c.precision.low_dtype = dtype == ElementType::kFloat32   ? P::LowType::kAuto
                            : dtype == ElementType::kFloat16 ? P::LowType::kFp16
                                                             : P::LowType::kBf16;
  }
  MIXTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t, Trainer::Create(path, c));
  const ResolvedDevice where = t->device();
  // Why the CPU was chosen matters to who asked for a device, or when there is a GPU it could not use.
  if (!where.note.empty() && (args.has("device") || where.note.find("the GPU lacks") != std::string::npos))
    std::fprintf(stderr, "mixtrain bench: %s\n", where.note.c_str());
  std::mt19937 rng(1234);
  TensorMap feeds;
  for (const TensorInfo& in : t->BatchInputs()) {
    MIXTRAIN_ASSIGN_OR_RETURN(feeds[in.name], RandomTensor(in.type, ConcreteDims(in, batch, sym), rng));
  }
  // --data: each step takes the next batch of an epoch's shuffled order, as `mixtrain train` does,
  // and the time it waits for that batch counts in the step's.
  std::optional<TrainingData> data;
  std::vector<int64_t> order;
  if (args.has("data")) {
    MIXTRAIN_ASSIGN_OR_RETURN(data, OpenTrainingData(args.str("data"), {.inputs = t->BatchInputs()}));
    if (data->train.size() < batch)
      return absl::InvalidArgumentError(absl::StrCat("--data=", args.str("data"), ": ", data->train.size(),
                                                     " examples, fewer than --batch-size=", batch));
    order = data->train.Order(true, 0, 0);
  }
  auto next_batch = [&, i = int64_t{0}]() mutable -> absl::Status {
    if (!data) return absl::OkStatus();
    const int64_t begin = (i++ % data->train.NumBatches(batch, /*drop_last=*/true)) * batch;
    MIXTRAIN_ASSIGN_OR_RETURN(feeds, data->train.Gather(order, begin, begin + batch));
    return absl::OkStatus();
  };
  using Clock = std::chrono::steady_clock;
  for (int64_t i = 0; i < warmup; ++i) {
    MIXTRAIN_RETURN_IF_ERROR(next_batch());
    MIXTRAIN_RETURN_IF_ERROR(t->Step(feeds, {.read_loss = true}).status());
  }
  t->SetProfiling(args.flag("profile"));
  std::vector<double> ms, wait_ms;
  for (int64_t i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    MIXTRAIN_RETURN_IF_ERROR(next_batch());
    wait_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    MIXTRAIN_RETURN_IF_ERROR(t->Step(feeds, {.read_loss = true}).status());
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const ResolvedPrecision p = t->precision();
  std::printf("model %s, batch %lld, train step on %s, precision %s (%s), loss scaling %s, %lld iterations after %lld warm-up\n",
              path.c_str(), static_cast<long long>(batch), where.name.c_str(), p.preset.c_str(), ElementTypeName(p.low_type),
              p.loss_scaling.c_str(), static_cast<long long>(iters), static_cast<long long>(warmup));
  std::printf("train step: median %.3f ms, min %.3f ms, max %.3f ms\n", Median(ms),
              *std::min_element(ms.begin(), ms.end()), *std::max_element(ms.begin(), ms.end()));
  if (data)
    std::printf("fed from %s: the step waited for its batch median %.3f ms, max %.3f ms (counted above)\n",
                args.str("data").c_str(), Median(wait_ms), *std::max_element(wait_ms.begin(), wait_ms.end()));
  std::printf("throughput: %.1f samples/s\n", batch * 1000.0 / Median(ms));
  if (args.flag("profile")) {
    cli::PrintStepProfile(t->Profile(), iters);
    if (const std::optional<MemoryStatistics> m = t->StepMemoryStatistics()) cli::PrintMemoryReport(*m);
  }
  return absl::OkStatus();
}

absl::Status Bench(const cli::Args& args) {
  if (args.positional().size() != 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "expects exactly one MODEL.onnx, got ", args.positional().size(), " arguments (see --help)"));
  const int64_t batch = args.integer("batch-size");
  const int64_t warmup = args.integer("warmup");
  const int64_t iters = args.integer("iters");
  MIXTRAIN_RETURN_IF_ERROR(cli::CheckInputPath("MODEL.onnx", args.positional()[0]));
  absl::StatusOr<ElementType> dtype = ParseElementType(args.str("dtype"));
  if (!dtype.ok() ||
      (*dtype != ElementType::kFloat32 && *dtype != ElementType::kFloat16 && *dtype != ElementType::kBFloat16))
    return absl::InvalidArgumentError(absl::StrCat("flag --dtype must be fp32, bf16 or fp16, not '",
                                                   args.str("dtype"), "'"));
  std::map<std::string, int64_t> sym_sizes;
  // A symbolic dim's size: like a batch size.
  const NumberRule& dim_rule = *TrainConfig::NumberRuleOf("data.batch_size");
  for (const std::string& kv : args.list("dims")) {
    std::vector<std::string> p = absl::StrSplit(kv, '=');
    if (p.size() != 2 || p[0].empty())
      return absl::InvalidArgumentError(absl::StrCat("flag --dims: '", kv, "' is not SYMBOL=SIZE"));
    MIXTRAIN_ASSIGN_OR_RETURN(double v, ParseNumber(absl::StrCat("--dims ", p[0]), p[1], dim_rule));
    sym_sizes[p[0]] = static_cast<int64_t>(v);
  }

  const std::string& path = args.positional()[0];
  if (args.flag("train")) return BenchTrain(args, path, batch, warmup, iters, *dtype, sym_sizes);
  InferenceOptions options;
  options.compute_type = *dtype;
  options.optimize = args.flag("optimize");
  options.float32_outputs = false;  // time the forward pass only
  options.device = args.str("device");
  MIXTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<InferenceSession> session, InferenceSession::Create(path, options));
  if (!session->DeviceNote().empty() &&
      (args.has("device") || session->DeviceNote().find("the GPU lacks") != std::string::npos))
    std::fprintf(stderr, "mixtrain bench: %s\n", session->DeviceNote().c_str());
  // Inputs() lists lowered inputs in the compute type, so the timed runs convert nothing.
  std::mt19937 rng(1234);
  TensorMap feeds;
  for (const TensorInfo& in : session->Inputs()) {
    MIXTRAIN_ASSIGN_OR_RETURN(feeds[in.name], RandomTensor(in.type, ConcreteDims(in, batch, sym_sizes), rng));
  }

  using Clock = std::chrono::steady_clock;
  for (int64_t i = 0; i < warmup; ++i) MIXTRAIN_RETURN_IF_ERROR(session->Run(feeds).status());
  session->SetProfiling(args.flag("profile"));
  std::vector<double> ms;
  for (int64_t i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    MIXTRAIN_RETURN_IF_ERROR(session->Run(feeds).status());
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const double median = Median(ms);
  const PlanStatistics st = session->LastPlanStatistics().value();  // iters >= 1 runs happened
  std::printf("model %s, batch %lld, %s on %s, %lld iterations after %lld warm-up\n", path.c_str(),
              static_cast<long long>(batch), ElementTypeName(*dtype), session->DeviceName().c_str(),
              static_cast<long long>(iters), static_cast<long long>(warmup));
  std::printf("forward: median %.3f ms, min %.3f ms, max %.3f ms per batch\n", median,
              *std::min_element(ms.begin(), ms.end()), *std::max_element(ms.begin(), ms.end()));
  std::printf("throughput: %.1f samples/s\n", batch * 1000.0 / median);
  std::printf("planned peak memory: %s (%s without reuse); %d kernels, %d folded, %d views, %d in place\n",
              Bytes(st.peak_planned_bytes).c_str(), Bytes(st.naive_bytes).c_str(), st.kernels, st.folded_nodes,
              st.view_nodes, st.inplace_outputs);
  if (args.flag("profile")) {
    std::vector<OpTypeTime> prof = session->Profile();
    double total = 0;
    for (const OpTypeTime& p : prof) total += p.seconds;
    std::printf("%-28s %12s %8s %10s\n", "op", "mean ms/batch", "share", "calls/batch");
    for (const OpTypeTime& p : prof)
      std::printf("%-28s %12.3f %7.1f%% %10.1f\n", p.op_type.c_str(), p.seconds * 1e3 / iters,
                  total > 0 ? 100 * p.seconds / total : 0.0, static_cast<double>(p.calls) / iters);
  }
  return absl::OkStatus();
}

// bench's own flags, then train's step flags it does not define itself (its --dtype picks the
// precision); data parallelism needs `mpirun`, which bench is not run under.
std::vector<cli::FlagSpec> BenchFlags(std::vector<cli::FlagSpec> own) {
  return cli::WithStepFlags(std::move(own), {"data-parallel", "deterministic"});
}

MT_REGISTER_COMMAND(
    bench, cli::Command{
               .name = "bench",
               .usage = "mixtrain bench MODEL.onnx --batch-size=N [--dtype=fp32|bf16|fp16] [--warmup=5] "
                        "[--iters=20] [--dims=SYM=SIZE,...] [--profile] [--no-optimize] [--train [--loss=...] "
                        "[--class-axis=N] [--data=FILE.npz|DIR] [--device=cpu|cuda|auto] [train's step flags: --recompute, "
                        "--optimizer, --lora-rank, --config, ...]]",
               .summary = "time the forward pass (or with --train the training step) on random inputs; prints "
                          "time per batch and peak memory",
               .flags = BenchFlags({
                       {.name = "batch-size", .default_value = "1",
                        .help = "size of every input's symbolic first dimension"},
                       {.name = "dtype", .default_value = "fp32", .help = "fp32, bf16 or fp16"},
                       {.name = "warmup", .default_value = "5", .help = "untimed runs first"},
                       {.name = "iters", .default_value = "20", .help = "timed runs"},
                       {.name = "dims", .default_value = "",
                        .help = "sizes of other symbolic dims by name (others are 1)"},
                       {.name = "optimize", .default_value = "true",
                        .help = "run the inference passes first (fusions, channels-last conv stacks); "
                                "--no-optimize runs the graph as imported",
                        .is_bool = true},
                       {.name = "profile", .default_value = "false",
                        .help = "print kernel time per op type (with --train: per phase, op type and node)",
                        .is_bool = true},
                       {.name = "train", .default_value = "false",
                        .help = "time the training step (forward, loss, backward, optimizer) instead of the "
                                "forward; --dtype fp32 trains in fp32, bf16/fp16 in AMP",
                        .is_bool = true},
                       {.name = "loss", .default_value = "cross_entropy",
                        .help = "--train: the loss (labels are random 0/1)"},
                       {.name = "class-axis", .default_value = "1",
                        .help = "--train: cross_entropy's class axis (-1 for N x T x V logits)"},
                       {.name = "data", .default_value = "",
                        .help = "--train: feed each step the next shuffled batch of this .npz or folder of .npy "
                                "files (as `mixtrain train --data`), timing the wait for it with the step"},
                       {.name = "device", .default_value = "auto",
                        .help = "cpu, cuda, or auto (cuda where a GPU is usable and has every kernel)"},
                   }),
               .run = [](const cli::Args& args) {
                 absl::Status s = Bench(args);
                 return s.ok() ? 0 : cli::Fail("bench", s);
               }});

}  // namespace
}  // namespace mixtrain
