#include "kernels/cpu/dnnl_common.h"

#include <algorithm>
#include <cstdlib>

#include "graph/check.h"

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_features.h"

namespace mixtrain::dnnl_util {

namespace {

// MIXTRAIN_MAX_ISA caps oneDNN too, unless oneDNN's own variables say otherwise. Must run before
// oneDNN dispatches anything: Engine() and NativeBf16() call it first.
void ApplyIsaCap() {
  static const bool done = [] {
    if (std::getenv("DNNL_MAX_CPU_ISA") != nullptr || std::getenv("ONEDNN_MAX_CPU_ISA") != nullptr)
      return true;
    const std::string& cap = CpuIsaCap();
    dnnl::cpu_isa isa = dnnl::cpu_isa::all;
    if (cap == "avx2") isa = dnnl::cpu_isa::avx2;
    else if (cap == "avx512_core") isa = dnnl::cpu_isa::avx512_core;
    else if (cap == "avx512") isa = dnnl::cpu_isa::avx512_core_bf16;
    if (isa != dnnl::cpu_isa::all) dnnl::set_max_cpu_isa(isa);
    return true;
  }();
  (void)done;
}

bool HasIsa(dnnl::cpu_isa have, dnnl::cpu_isa want) {
  return (static_cast<unsigned>(have) & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
}

}  // namespace

dnnl::engine& Engine() {
  ApplyIsaCap();
  static dnnl::engine* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

bool NativeBf16() {
  static const bool native = [] {
    ApplyIsaCap();
    return GetCpuFeatures().native_bf16() &&
           HasIsa(dnnl::get_effective_cpu_isa(), dnnl::cpu_isa::avx512_core_bf16);
  }();
  return native;
}

bool NativeChannelBlocked() {
  static const bool native = [] {
    ApplyIsaCap();
    return GetCpuFeatures().avx512_core && HasIsa(dnnl::get_effective_cpu_isa(), dnnl::cpu_isa::avx512_core);
  }();
  return native;
}

const char* DnnlIsaName() {
  ApplyIsaCap();
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  using I = dnnl::cpu_isa;
  for (auto [i, name] : {std::pair{I::avx512_core_amx, "avx512_core_amx"},
                         std::pair{I::avx512_core_bf16, "avx512_core_bf16"},
                         std::pair{I::avx512_core_vnni, "avx512_core_vnni"},
                         std::pair{I::avx512_core, "avx512_core"}, std::pair{I::avx2_vnni, "avx2_vnni"},
                         std::pair{I::avx2, "avx2"}, std::pair{I::avx, "avx"},
                         std::pair{I::sse41, "sse41"}})
    if (HasIsa(isa, i)) return name;
  return "none";
}

dnnl::stream& Stream() {
  thread_local dnnl::stream s(Engine());
  return s;
}

absl::StatusOr<dnnl::memory::data_type> ToDnnl(DType t) {
  switch (t) {
    case DType::kF32:
      return dnnl::memory::data_type::f32;
    case DType::kBF16:
      return dnnl::memory::data_type::bf16;
    case DType::kF16:
      return dnnl::memory::data_type::f16;
    default:
      return absl::UnimplementedError(absl::StrCat("dtype ", DTypeName(t), " has no oneDNN path"));
  }
}

dnnl::memory::dims ToDims(std::span<const int64_t> v) {
  return dnnl::memory::dims(v.begin(), v.end());
}

std::vector<int64_t> DenseStrides(std::span<const int64_t> dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * std::max<int64_t>(dims[i + 1], 1);
  return s;
}

dnnl::memory::desc PlainDesc(std::span<const int64_t> dims, dnnl::memory::data_type dt) {
  return StridedDesc(dims, DenseStrides(dims), dt);
}

dnnl::memory::desc StridedDesc(std::span<const int64_t> dims, std::span<const int64_t> strides,
                               dnnl::memory::data_type dt) {
  return dnnl::memory::desc(ToDims(dims), dt, ToDims(strides));
}

void ShapeKey(const KernelContext& ctx, std::vector<int64_t>* out) {
  std::vector<int64_t>& key = *out;
  key.clear();
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const TensorView* t = ctx.input(i);
    if (t == nullptr) {
      key.push_back(-2);
      continue;
    }
    key.push_back(static_cast<int64_t>(t->dtype));
    key.push_back(t->rank());
    key.insert(key.end(), t->dims.begin(), t->dims.end());
  }
}

namespace {

// The thread's scratch arena (see StartScratch).
struct ScratchArena {
  static constexpr size_t kAlign = 64;
  static size_t Round(size_t n) { return (std::max<size_t>(n, 1) + kAlign - 1) / kAlign * kAlign; }
  static void* Allocate(size_t n) {
    void* p = std::aligned_alloc(kAlign, n);
    MT_CHECK(p != nullptr) << "out of memory for " << n << " bytes of kernel scratch";
    return p;
  }
  ~ScratchArena() {
    std::free(base);
    for (void* p : extra) std::free(p);
  }
  void* base = nullptr;
  size_t capacity = 0, used = 0;
  size_t needed = 0;         // the most one call has taken
  std::vector<void*> extra;  // blocks past the arena in this call
};

ScratchArena& Arena() {
  thread_local ScratchArena a;
  return a;
}

}  // namespace

void StartScratch() {
  ScratchArena& a = Arena();
  for (void* p : a.extra) std::free(p);
  a.extra.clear();
  if (a.needed > a.capacity) {
    std::free(a.base);
    a.base = ScratchArena::Allocate(a.needed);
    a.capacity = a.needed;
  }
  a.used = 0;
}

void* TakeScratch(size_t bytes) {
  ScratchArena& a = Arena();
  const size_t n = ScratchArena::Round(bytes);
  a.used += n;
  a.needed = std::max(a.needed, a.used);
  if (a.used <= a.capacity) return static_cast<uint8_t*>(a.base) + (a.used - n);
  a.extra.push_back(ScratchArena::Allocate(n));
  return a.extra.back();
}

dnnl::memory Unbound(const dnnl::memory::desc& md) {
  return dnnl::memory(md, Engine(), DNNL_MEMORY_NONE);
}

dnnl::primitive_attr Attr(dnnl::primitive_attr attr) {
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

BoundPrimitive::BoundPrimitive(dnnl::primitive p) : prim_(std::move(p)) {
  const_dnnl_primitive_desc_t pd = prim_.get_primitive_desc();
  const_dnnl_primitive_attr_t attr = nullptr;
  dnnl_scratchpad_mode_t mode = dnnl_scratchpad_mode_library;
  dnnl::error::wrap_c_api(dnnl_primitive_desc_get_attr(pd, &attr), "could not get primitive attributes");
  dnnl::error::wrap_c_api(dnnl_primitive_attr_get_scratchpad_mode(attr, &mode), "could not get scratchpad mode");
  MT_CHECK(mode == dnnl_scratchpad_mode_user)
      << "a primitive built without dnnl_util::Attr() would use the creating thread's scratchpad";
  const dnnl_memory_desc_t* md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  scratchpad_bytes_ = md == nullptr ? 0 : dnnl_memory_desc_get_size(md);
  if (scratchpad_bytes_ > 0) Arg(DNNL_ARG_SCRATCHPAD, dnnl::memory::desc(*md));
}

dnnl::memory& BoundPrimitive::Arg(int arg, dnnl::memory m) {
  MT_CHECK(!has(arg)) << "argument " << arg << " bound twice";
  keys_.push_back(arg);
  mems_.push_back(std::move(m));
  args_.clear();
  for (size_t i = 0; i < keys_.size(); ++i) args_.push_back({keys_[i], mems_[i].get()});
  return mems_.back();
}

bool BoundPrimitive::has(int arg) const {
  return std::find(keys_.begin(), keys_.end(), arg) != keys_.end();
}

dnnl::memory& BoundPrimitive::at(int arg) {
  auto it = std::find(keys_.begin(), keys_.end(), arg);
  MT_CHECK(it != keys_.end()) << "argument " << arg << " was never bound";
  return mems_[it - keys_.begin()];
}

void BoundPrimitive::Execute() {
  if (scratchpad_bytes_ > 0) Bind(at(DNNL_ARG_SCRATCHPAD), TakeScratch(scratchpad_bytes_));
  for (size_t i = 0; i < mems_.size(); ++i)
    MT_CHECK(mems_[i].get_data_handle() != nullptr) << "argument " << keys_[i] << " was never bound to a buffer";
  dnnl::error::wrap_c_api(dnnl_primitive_execute(prim_.get(), Stream().get(),
                                                 static_cast<int>(args_.size()), args_.data()),
                          "could not execute a primitive");
}

BoundReorder::BoundReorder(const dnnl::memory::desc& from_md, const dnnl::memory::desc& to_md)
    : run(dnnl::reorder(dnnl::reorder::primitive_desc(Engine(), from_md, Engine(), to_md, Attr()))) {
  run.Arg(DNNL_ARG_FROM, from_md);
  run.Arg(DNNL_ARG_TO, to_md);
}

const void* Fp32Staging::Input(const TensorView& t) {
  if (!Staged(t.dtype)) return t.data;
  float* f = static_cast<float*>(TakeScratch(t.numel() * sizeof(float)));
  if (t.dtype == DType::kF16)
    cpu::HalfToFloatN(t.as<uint16_t>(), f, t.numel());
  else
    cpu::BFloat16ToFloatN(t.as<uint16_t>(), f, t.numel());
  return f;
}

void* Fp32Staging::Output(TensorView& t) {
  if (!Staged(t.dtype)) return t.data;
  float* f = static_cast<float*>(TakeScratch(t.numel() * sizeof(float)));
  pending_.emplace_back(f, &t);
  return f;
}

void Fp32Staging::Finish() {
  for (auto& [f, t] : pending_) {
    if (t->dtype == DType::kF16)
      cpu::FloatToHalfN(f, t->as<uint16_t>(), t->numel());
    else
      cpu::FloatToBFloat16N(f, t->as<uint16_t>(), t->numel());
  }
  pending_.clear();
}

}  // namespace mixtrain::dnnl_util
