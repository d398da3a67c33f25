// `mixtrain bench MODEL.onnx --batch-size=N [--dtype=fp32|bf16|fp16] [--warmup=5] [--iters=20]
// [--dims=SYM=SIZE,...] [--profile]`: times the forward pass on random inputs and prints the time
// per batch (median, min, max), throughput and the planned peak memory; --profile adds the
// kernel time per op type.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "graph/onnx_import.h"
#include "kernels/common/half.h"
#include "runtime/session.h"
#include "tools/cli.h"
#include "tools/low_precision.h"

namespace mixtrain {
namespace {

// Random contents: floats uniform in [-1, 1); integers 0 or 1 (valid as indices and labels).
Tensor RandomTensor(DType dtype, std::vector<int64_t> dims, std::mt19937& rng) {
  Tensor t(DType::kF32, dims);
  if (IsFloat(dtype)) {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = u(rng);
    return dtype == DType::kF64 ? t : ConvertFloat(t, dtype);
  }
  Tensor r(dtype, dims);
  std::uniform_int_distribution<int> u(0, 1);
  for (int64_t i = 0; i < r.numel(); ++i) {
    int v = dtype == DType::kBool ? 0 : u(rng);
    switch (dtype) {
      case DType::kI64: r.data_as<int64_t>()[i] = v; break;
      case DType::kI32: r.data_as<int32_t>()[i] = v; break;
      default: static_cast<uint8_t*>(r.data())[i] = static_cast<uint8_t>(v); break;
    }
  }
  return r;
}

std::string Bytes(size_t n) {
  if (n < (1u << 20)) return absl::StrFormat("%.1f KiB", n / 1024.0);
  return absl::StrFormat("%.2f MiB", n / 1048576.0);
}

absl::Status Bench(const cli::Args& args) {
  if (args.positional().size() != 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "expects exactly one MODEL.onnx, got ", args.positional().size(), " arguments (see --help)"));
  MT_ASSIGN_OR_RETURN(int64_t batch, args.integer("batch-size"));
  MT_ASSIGN_OR_RETURN(int64_t warmup, args.integer("warmup"));
  MT_ASSIGN_OR_RETURN(int64_t iters, args.integer("iters"));
  if (batch < 1) return absl::InvalidArgumentError("flag --batch-size must be at least 1");
  if (warmup < 0 || iters < 1) return absl::InvalidArgumentError("flags --warmup >= 0 and --iters >= 1 please");
  absl::StatusOr<DType> dtype = ParseDType(args.str("dtype"));
  if (!dtype.ok() || (*dtype != DType::kF32 && *dtype != DType::kF16 && *dtype != DType::kBF16))
    return absl::InvalidArgumentError(absl::StrCat("flag --dtype must be fp32, bf16 or fp16, not '",
                                                   args.str("dtype"), "'"));
  std::map<std::string, int64_t> sym_sizes;
  for (const std::string& kv : args.list("dims")) {
    std::vector<std::string> p = absl::StrSplit(kv, '=');
    int64_t v = 0;
    if (p.size() != 2 || !absl::SimpleAtoi(p[1], &v) || v < 0)
      return absl::InvalidArgumentError(absl::StrCat("flag --dims: '", kv, "' is not SYMBOL=SIZE"));
    sym_sizes[p[0]] = v;
  }

  const std::string& path = args.positional()[0];
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxFile(path));
  if (*dtype != DType::kF32) MT_RETURN_IF_ERROR(LowerFloatModel(*g, *dtype));
  // Symbolic dims: --dims by name, else the batch size for dim 0, else 1.
  std::mt19937 rng(1234);
  std::map<std::string, Tensor> feeds;
  for (const Value* v : g->inputs()) {
    if (v->is_initializer()) continue;
    std::vector<int64_t> dims;
    for (size_t d = 0; d < v->shape.dims.size(); ++d) {
      const Dim& dim = v->shape.dims[d];
      if (dim.known()) dims.push_back(dim.value);
      else if (sym_sizes.contains(dim.symbol)) dims.push_back(sym_sizes[dim.symbol]);
      else dims.push_back(d == 0 ? batch : 1);
    }
    feeds[v->name] = RandomTensor(v->dtype, dims, rng);
  }
  MT_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::Create(*g));

  using Clock = std::chrono::steady_clock;
  for (int64_t i = 0; i < warmup; ++i) MT_RETURN_IF_ERROR(session->Run(feeds).status());
  session->set_profiling(args.flag("profile"));
  std::vector<double> ms;
  for (int64_t i = 0; i < iters; ++i) {
    auto t0 = Clock::now();
    MT_RETURN_IF_ERROR(session->Run(feeds).status());
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                    : (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2;
  const PlanStats& st = *session->last_plan_stats();
  std::printf("model %s, batch %lld, %s, %lld iterations after %lld warm-up\n", path.c_str(),
              static_cast<long long>(batch), DTypeName(*dtype), static_cast<long long>(iters),
              static_cast<long long>(warmup));
  std::printf("forward: median %.3f ms, min %.3f ms, max %.3f ms per batch\n", median, sorted.front(),
              sorted.back());
  std::printf("throughput: %.1f samples/s\n", batch * 1000.0 / median);
  std::printf("planned peak memory: %s (%s without reuse); %d kernels, %d folded, %d views, %d in place\n",
              Bytes(st.peak_planned_bytes).c_str(), Bytes(st.naive_bytes).c_str(), st.steps, st.folded_nodes,
              st.view_nodes, st.inplace_outputs);
  if (args.flag("profile")) {
    std::vector<OpProfile> prof = session->Profile();
    double total = 0;
    for (const OpProfile& p : prof) total += p.seconds;
    std::printf("%-28s %12s %8s %10s\n", "op", "mean ms/batch", "share", "calls/batch");
    for (const OpProfile& p : prof)
      std::printf("%-28s %12.3f %7.1f%% %10.1f\n", p.op_type.c_str(), p.seconds * 1e3 / iters,
                  total > 0 ? 100 * p.seconds / total : 0.0, static_cast<double>(p.calls) / iters);
  }
  return absl::OkStatus();
}

MT_REGISTER_COMMAND(
    bench, cli::Command{
               .name = "bench",
               .usage = "mixtrain bench MODEL.onnx --batch-size=N [--dtype=fp32|bf16|fp16] [--warmup=5] "
                        "[--iters=20] [--dims=SYM=SIZE,...] [--profile]",
               .summary = "time the forward pass on random inputs; prints time per batch and peak memory",
               .flags =
                   {
                       {.name = "batch-size", .default_value = "1",
                        .help = "size of every input's symbolic first dimension"},
                       {.name = "dtype", .default_value = "fp32", .help = "fp32, bf16 or fp16"},
                       {.name = "warmup", .default_value = "5", .help = "untimed runs first"},
                       {.name = "iters", .default_value = "20", .help = "timed runs"},
                       {.name = "dims", .default_value = "",
                        .help = "sizes of other symbolic dims by name (others are 1)"},
                       {.name = "profile", .default_value = "false",
                        .help = "print kernel time per op type", .is_bool = true},
                   },
               .run = [](const cli::Args& args) {
                 absl::Status s = Bench(args);
                 return s.ok() ? 0 : cli::Fail("bench", s);
               }});

}  // namespace
}  // namespace mixtrain
