// Shared plumbing of the oneDNN-backed CPU kernels (matmul, conv, pooling): the engine and
// stream, memory descriptors over our dense row-major buffers (ONNX layout, no reorders), a
// per-kernel cache of primitives keyed by input shapes, low-precision staging through fp32 (oneDNN
// has no fp16 kernels on CPUs without avx512_fp16, and no bf16 ones below avx512_core), and
// turning oneDNN exceptions into Status.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/registry.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace mixtrain::dnnl_util {

// The engine; creating it first applies MIXTRAIN_MAX_ISA to oneDNN (cpu_features.h).
dnnl::engine& Engine();
// One in-order stream per calling thread.
dnnl::stream& Stream();

// Whether oneDNN runs bf16 matmul/conv/pool natively: the CPU has bf16 dot products (or AMX),
// and neither MIXTRAIN_MAX_ISA nor oneDNN's own ISA cap rules them out.
bool NativeBf16();
// Whether oneDNN's effective ISA (after the cap) has AVX-512 (avx512_core): its kernels for the
// 16-channel-blocked layout (nChw16c) need it; below, that layout runs its reference code.
bool NativeChannelBlocked();
// oneDNN's effective ISA ("avx2", "avx512_core_bf16", ...), after every cap.
const char* DnnlIsaName();

// The dtype oneDNN computes in: fp16 is staged through fp32, bf16 too where it is not native.
inline DType ComputeType(DType t) {
  if (t == DType::kF16 || (t == DType::kBF16 && !NativeBf16())) return DType::kF32;
  return t;
}
absl::StatusOr<dnnl::memory::data_type> ToDnnl(DType t);

dnnl::memory::dims ToDims(std::span<const int64_t> v);
// Dense row-major descriptor of `dims`.
dnnl::memory::desc PlainDesc(std::span<const int64_t> dims, dnnl::memory::data_type dt);
// Descriptor with explicit strides (transposed or permuted views of dense buffers).
dnnl::memory::desc StridedDesc(std::span<const int64_t> dims, std::span<const int64_t> strides,
                               dnnl::memory::data_type dt);
// Row-major strides of dense `dims`.
std::vector<int64_t> DenseStrides(std::span<const int64_t> dims);

// The attributes every primitive here is built with (pass `attr` to extend given ones): the
// caller provides the scratchpad (scratchpad_mode::user), which BoundPrimitive::Execute takes
// from the calling thread's scratch on each call. oneDNN's default mode ("library") hands each
// primitive the scratchpad of the thread that created it, held in a thread_local of oneDNN's
// (global_scratchpad_t; every oneDNN built without DNNL_ENABLE_CONCURRENT_EXEC, Debian's
// included): executed on another thread, the primitive reads that thread's scratchpad pointer
// instead, which is null where no primitive was created (a SIGSEGV at a small address inside the
// JIT code: issue 33, an InferenceSession run on a second thread) or a buffer that another
// primitive running there uses at the same time. BoundPrimitive refuses other attributes.
dnnl::primitive_attr Attr(dnnl::primitive_attr attr = {});

// Runs `f`, which builds or executes oneDNN objects; a dnnl::error (unsupported configuration,
// out of memory) becomes a Status naming the node.
template <typename F>
absl::Status Guard(const KernelContext& ctx, const char* what, F&& f) {
  try {
    f();
  } catch (const dnnl::error& e) {
    return ctx.Error(absl::StrCat(what, ": oneDNN error ", static_cast<int>(e.status), ": ",
                                  e.what()));
  }
  return absl::OkStatus();
}

// Primitives built for the shapes a kernel instance has seen: create once, execute many. Plans
// re-run with few distinct shapes; the bound keeps a shape-churning caller from growing it.
template <typename Entry>
class ShapeCache {
 public:
  Entry* Find(const std::vector<int64_t>& key) {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : it->second.get();
  }
  Entry* Insert(const std::vector<int64_t>& key, std::unique_ptr<Entry> e) {
    if (entries_.size() >= kMaxEntries) entries_.clear();
    return entries_.emplace(key, std::move(e)).first->second.get();
  }

 private:
  static constexpr size_t kMaxEntries = 16;
  std::map<std::vector<int64_t>, std::unique_ptr<Entry>> entries_;
};

// The cache key of a call into `key`: every present input's dims and dtype (absent inputs
// mark -2). Reuses key's capacity: no allocation once it has held a key this long.
void ShapeKey(const KernelContext& ctx, std::vector<int64_t>* key);

// Scratch memory shared by every kernel call on the calling thread: one arena, from which a
// call takes buffers in turn (TakeScratch) after starting with StartScratch, which gives back
// everything the previous call on the thread took. Kernels run one at a time per thread, so
// the process holds the most scratch any one call needs, not the sum over the kernels, and
// once the arena has grown to that (the first step) nothing is allocated. A call that needs
// more than the arena holds gets extra blocks, freed and folded into one larger arena at the
// next start. Buffers are 64-byte aligned. Fp32Staging::Begin starts the call's scratch.
void StartScratch();
void* TakeScratch(size_t bytes);

// A oneDNN memory object with no buffer yet: Bind points it at one (no allocation).
dnnl::memory Unbound(const dnnl::memory::desc& md);
inline void Bind(dnnl::memory& m, const void* p) { m.set_data_handle(const_cast<void*>(p)); }

// A primitive and its arguments, bound once: the memory objects are made when it is built and
// pointed at each call's buffers with Bind, and it runs through oneDNN's C API from a fixed
// argument array. The C++ API's execute(stream, unordered_map) and a dnnl::memory per operand
// per call cost ~20 heap allocations; this costs the ~5 oneDNN's execute makes inside itself
// (its own argument map), which its API gives no way to avoid. The primitive must be built with
// Attr(): its scratchpad, when it needs one, is bound to the calling thread's scratch (TakeScratch)
// on each Execute, so a primitive runs on any thread, and on several at once.
class BoundPrimitive {
 public:
  BoundPrimitive() = default;
  explicit BoundPrimitive(dnnl::primitive p);
  // Adds argument `arg` as a new unbound memory of `md`; returns it for Bind.
  dnnl::memory& Arg(int arg, const dnnl::memory::desc& md) { return Arg(arg, Unbound(md)); }
  // Adds argument `arg` as `m`, which another primitive may share (a reorder's output).
  dnnl::memory& Arg(int arg, dnnl::memory m);
  // The memory of argument `arg` (aborts when it was never added).
  dnnl::memory& at(int arg);
  bool has(int arg) const;
  // Runs it on the thread's stream, with its scratchpad from the thread's scratch (so after
  // StartScratch in the same call); throws dnnl::error as the C++ API does.
  void Execute();
  explicit operator bool() const { return static_cast<bool>(prim_); }

 private:
  dnnl::primitive prim_;
  size_t scratchpad_bytes_ = 0;  // 0: the primitive needs none
  std::vector<int> keys_;
  std::vector<dnnl::memory> mems_;
  std::vector<dnnl_exec_arg_t> args_;
};

// A reorder between two layouts of one tensor, bound as above: `from` and `to` are its
// memories.
struct BoundReorder {
  BoundReorder(const dnnl::memory::desc& from_md, const dnnl::memory::desc& to_md);
  dnnl::memory& from() { return run.at(DNNL_ARG_FROM); }
  dnnl::memory& to() { return run.at(DNNL_ARG_TO); }
  void Execute() { run.Execute(); }
  BoundPrimitive run;
};

// Makes low-precision tensors look like fp32 ones for one Compute call: inputs are widened into
// scratch buffers, outputs are computed into scratch and rounded back (nearest-even) by Finish().
// A tensor is staged when ComputeType() of its dtype is fp32: fp16 always, bf16 where oneDNN has
// no native bf16. Other tensors pass through. Begin() starts the call's scratch (StartScratch),
// which the staged copies come from, so a kernel calls it before taking any scratch itself.
// The conversions are vector loops (convert.h) split over the cores.
class Fp32Staging {
 public:
  Fp32Staging() : stage_bf16_(!NativeBf16()) { pending_.reserve(8); }
  void Begin() {
    StartScratch();
    pending_.clear();
  }
  const void* Input(const TensorView& t);
  void* Output(TensorView& t);
  void Finish();

 private:
  bool Staged(DType t) const { return t == DType::kF16 || (stage_bf16_ && t == DType::kBF16); }
  bool stage_bf16_;
  std::vector<std::pair<const float*, TensorView*>> pending_;
};

}  // namespace mixtrain::dnnl_util
