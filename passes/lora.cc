// The lora pass: see lora.h.
#include "passes/lora.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <regex>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "graph/dtype.h"
#include "graph/shape_inference.h"
#include "passes/parameters.h"
#include "passes/pass_registry.h"

namespace mixtrain {
namespace {

bool IsOnnxOp(const Node& n, const char* op) { return n.domain().empty() && n.op_type() == op; }

// A 2-D Transpose that swaps the axes (no perm is the reverse order: the swap in 2-D).
bool IsSwap(const Node& n) {
  if (!IsOnnxOp(n, "Transpose")) return false;
  const std::vector<int64_t> perm = n.attr_ints("perm");
  return perm.empty() || perm == std::vector<int64_t>{1, 0};
}

// Cast(W, to = f32) of a bf16/fp16 initializer: how StoreLoraTargetsLow leaves a frozen target.
bool IsWidening(const Node& n) {
  return IsOnnxOp(n, "Cast") && n.input(0) != nullptr && n.input(0)->is_initializer() &&
         IsLowFloat(n.input(0)->dtype) && n.attr_int("to", 0) == 1;  // TensorProto.FLOAT
}

// How product `n` reads an initializer as its weight (the right operand of x·W).
struct WeightRead {
  Value* weight = nullptr;
  bool transposed = false;
  bool conv = false;  // W is a Conv kernel [out, in, k...]
  std::string unsupported;  // why this read cannot take an adapter ("" when it can)
};

// y = x·W by MatMul/Gemm (W read directly, through a Transpose or Gemm's transB) or y = Conv(x, W)
// (W [out, in, k...]); either W may be read through the widening Cast StoreLoraTargetsLow leaves.
std::optional<WeightRead> ReadsWeight(const Node& n) {
  const bool conv = IsOnnxOp(n, "Conv") || IsOnnxOp(n, "ConvTranspose"), gemm = IsOnnxOp(n, "Gemm");
  if (!conv && !gemm && !IsOnnxOp(n, "MatMul")) return std::nullopt;
  WeightRead r;
  r.conv = conv;
  Value* v = n.input(1);
  if (gemm) r.transposed = n.attr_int("transB", 0) != 0;
  if (!conv && v != nullptr && v->producer != nullptr && IsSwap(*v->producer) && v->consumers.size() == 1) {
    r.transposed = !r.transposed;
    v = v->producer->input(0);
  }
  bool widened = false;
  if (v != nullptr && v->producer != nullptr && IsWidening(*v->producer)) {
    v = v->producer->input(0);
    widened = true;
  }
  if (v == nullptr || !v->is_initializer()) return std::nullopt;
  r.weight = v;
  const Tensor& w = *v->initializer;
  const std::string read_by = absl::StrCat(n.op_type(), " '", n.name(), "'");
  if (n.op_type() == "ConvTranspose") {
    r.unsupported = absl::StrCat("is read by ", read_by, " (LoRA adapts the weights of MatMul, Gemm and Conv)");
  } else if (conv ? w.rank() < 3 : w.rank() != 2) {
    r.unsupported = absl::StrCat("is [", absl::StrJoin(w.dims(), ", "), "], not ",
                                 conv ? "a convolution kernel" : "a 2-D weight", " (read by ", read_by, ")");
  } else if (conv && n.attr_int("group", 1) != 1) {
    r.unsupported = absl::StrCat("is read by ", read_by, " with group = ", n.attr_int("group", 1),
                                 ": a grouped convolution's adapter could not be merged into it");
  } else if (w.dtype() != DType::kF32 && !widened) {
    r.unsupported = absl::StrCat("is ", DTypeName(w.dtype()), ": LoRA adapts fp32 weights");
  } else if (gemm && (n.attr_int("transA", 0) != 0 || n.attr_float("alpha", 1.0f) != 1.0f)) {
    r.unsupported = absl::StrCat("is read by ", read_by, " with transA or alpha != 1");
  }
  return r;
}

// Whether `v` is read through `n` as a product's weight (directly, or through a swap or a
// widening Cast all of whose readers do).
bool ReadAsWeight(const Node& n, const Value* v) {
  if ((IsSwap(n) || IsWidening(n)) && n.output(0) != nullptr) {
    for (const Node* c : n.output(0)->consumers)
      if (!ReadAsWeight(*c, v)) return false;
    return !n.output(0)->consumers.empty();
  }
  auto r = ReadsWeight(n);
  return r && r->weight == v && n.input(0) != v;
}

// splitmix64: A's draw is a function of the seed and W's name only.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// PEFT's init of lora_A: kaiming_uniform_(a=sqrt(5)) on a [rank, in] Linear weight (or a
// [rank, in, k...] Conv kernel) is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in (times the
// kernel's size); drawn in `dims`' order.
Tensor KaimingUniform(std::vector<int64_t> dims, int64_t fan_in, uint64_t seed, const std::string& name) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ull;
  for (unsigned char c : name) state = (state ^ c) * 1099511628211ull;
  Tensor t(DType::kF32, std::move(dims));
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    state += 0x9E3779B97F4A7C15ull;
    const double u = static_cast<double>(Mix(state) >> 11) * 0x1.0p-53;  // [0, 1)
    p[i] = static_cast<float>((2 * u - 1) * bound);
  }
  return t;
}

// Whether the result of product `p` reaches a graph output without passing another product:
// the model's head (an LM head, a classifier), which the default targets leave alone even where
// its shape happens to equal a block's.
bool IsHead(const Graph& g, const Node& p) {
  std::vector<const Value*> todo{p.output(0)};
  absl::flat_hash_set<const Value*> seen;
  while (!todo.empty()) {
    const Value* v = todo.back();
    todo.pop_back();
    if (v == nullptr || !seen.insert(v).second) continue;
    if (g.IsGraphOutput(v)) return true;
    for (const Node* c : v->consumers) {
      if (ReadsWeight(*c)) continue;  // another product: p feeds it, p is not the last
      for (const Value* o : c->outputs()) todo.push_back(o);
    }
  }
  return false;
}

std::string Dims(const std::vector<int64_t>& d) { return absl::StrCat("[", absl::StrJoin(d, ", "), "]"); }

class LoraPass final : public Pass {
 public:
  explicit LoraPass(LoraOptions o) : opt_(std::move(o)) {}
  absl::string_view name() const override { return "lora"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    if (opt_.rank <= 0) return false;
    MT_ASSIGN_OR_RETURN(std::vector<LoraTarget> targets, FindLoraTargets(g, opt_));
    MT_RETURN_IF_ERROR(CheckInit(targets));
    const float scale = opt_.alpha / static_cast<float>(opt_.rank);
    Value* s = g.AddInitializer(g.UniqueName("lora/scale"), Tensor::Scalar(scale));
    s->metadata[kFoldedMetadata] = kPassConstant;
    Value* ratio = nullptr;
    if (opt_.dropout > 0) {
      ratio = g.AddInitializer(g.UniqueName("lora/dropout_ratio"), Tensor::Scalar(opt_.dropout));
      ratio->metadata[kFoldedMetadata] = kPassConstant;
    }
    for (const LoraTarget& t : targets) {
      MT_ASSIGN_OR_RETURN(Value * a, Adapter(g, t, LoraAName(t.weight), LoraADims(t, opt_.rank), "A"));
      MT_ASSIGN_OR_RETURN(Value * b, Adapter(g, t, LoraBName(t.weight), LoraBDims(t, opt_.rank), "B"));
      for (const std::string& product : t.products) {
        Node* p = nullptr;
        for (const auto& n : g.nodes())
          if (n->name() == product) p = n.get();
        MT_CHECK(p != nullptr) << "lora: product " << product << " vanished";
        AddBranch(g, *p, a, b, s, ratio, !t.kernel.empty());
      }
    }
    MT_RETURN_IF_ERROR(g.TopoSort());
    MT_RETURN_IF_ERROR(InferShapes(g));
    return true;
  }

 private:
  // Every target has its A and B in the init file with this model's shapes; nothing else is there.
  absl::Status CheckInit(const std::vector<LoraTarget>& targets) const {
    if (opt_.init == nullptr) return absl::OkStatus();
    std::map<std::string, std::vector<int64_t>> want;
    for (const LoraTarget& t : targets) {
      want[LoraAName(t.weight)] = LoraADims(t, opt_.rank);
      want[LoraBName(t.weight)] = LoraBDims(t, opt_.rank);
    }
    const std::string file = absl::StrCat("--lora-init=", opt_.init_path);
    for (const auto& [name, tensor] : *opt_.init) {
      auto it = want.find(name);
      if (it == want.end())
        return absl::InvalidArgumentError(absl::StrCat(
            file, ": holds '", name, "', which adapts no weight targeted in this model (an adapter file for another model or "
            "other --lora-targets?)"));
      if (tensor.dtype() != DType::kF32 || tensor.dims() != it->second)
        return absl::InvalidArgumentError(absl::StrCat(file, ": '", name, "' is ", DTypeName(tensor.dtype()), " ",
                                                       Dims(tensor.dims()), " but this model and --lora-rank=", opt_.rank,
                                                       " need float ", Dims(it->second), " (an adapter file for another model?)"));
    }
    for (const auto& [name, dims] : want)
      if (!opt_.init->contains(name))
        return absl::InvalidArgumentError(absl::StrCat(file, ": has no '", name, "' for a targeted weight of this model"));
    return absl::OkStatus();
  }

  absl::StatusOr<Value*> Adapter(Graph& g, const LoraTarget& t, const std::string& name, std::vector<int64_t> dims,
                                 const char* role) {
    if (g.FindValue(name) != nullptr)
      return absl::InvalidArgumentError(absl::StrCat("lora: the model already has a value named '", name,
                                                     "' (the adapter of '", t.weight, "')"));
    Tensor init;
    if (opt_.init != nullptr) {
      init = opt_.init->at(name).Clone();
    } else if (std::string(role) == "A") {
      init = KaimingUniform(std::move(dims), LoraFanIn(t), opt_.seed, t.weight);
    } else {
      init = Tensor(DType::kF32, dims);
    }
    Value* v = g.AddInitializer(name, std::move(init));
    v->metadata[kLoraRole] = role;
    v->metadata[kLoraTarget] = t.weight;
    v->metadata[kLoraScale] = absl::StrFormat("%.9g", opt_.alpha / static_cast<float>(opt_.rank));
    v->metadata[kLoraTransposed] = t.transposed ? "1" : "0";
    return v;
  }

  // y = P(x, W) becomes y = P(x, W) + (dropout(x)·A)·s·B; y keeps its name and readers. For a
  // Conv, x·A is Conv(x, A) with P's kernel, strides, pads and dilations (PEFT's lora_A), and
  // ·B a 1x1 Conv (lora_B), so the branch's output has y's shape and merges into W exactly.
  static void AddBranch(Graph& g, Node& p, Value* a, Value* b, Value* s, Value* ratio, bool conv) {
    Value* y = p.output(0);
    Value* base = g.AddValue(g.UniqueName(y->name + "/base"), y->dtype, y->shape);
    g.SetNodeOutput(&p, 0, base);
    const std::string at = p.name() + "/lora";
    Value* x = p.input(0);
    if (ratio != nullptr) {
      if (g.opset() >= 12) {
        x = g.AddNode("Dropout", {x, ratio}, 1, g.UniqueName(at + "/Dropout"))->output(0);
      } else {
        Node* d = g.AddNode("Dropout", {x}, 1, g.UniqueName(at + "/Dropout"));
        d->SetAttr(Attribute::Float("ratio", ratio->initializer->data_as<float>()[0]));
        x = d->output(0);
      }
    }
    const char* op = conv ? "Conv" : "MatMul";
    Node* down = g.AddNode(op, {x, a}, 1, g.UniqueName(at + "/A"));
    if (conv)
      for (const Attribute& attr : p.attributes())
        if (attr.name != "group") down->SetAttr(attr);
    Value* scaled = g.AddNode("Mul", {down->output(0), s}, 1, g.UniqueName(at + "/scale"))->output(0);
    Value* delta = g.AddNode(op, {scaled, b}, 1, g.UniqueName(at + "/B"))->output(0);
    g.AddNode("Add", {base, delta}, {y}, g.UniqueName(at + "/Add"));
  }

  LoraOptions opt_;
};

}  // namespace

std::string LoraAName(const std::string& weight) { return weight + ".lora_A"; }

int64_t LoraFanIn(const LoraTarget& t) {
  int64_t n = t.in;
  for (int64_t k : t.kernel) n *= k;
  return n;
}

std::vector<int64_t> LoraADims(const LoraTarget& t, int64_t rank) {
  if (t.kernel.empty()) return {t.in, rank};
  std::vector<int64_t> d{rank, t.in};
  d.insert(d.end(), t.kernel.begin(), t.kernel.end());
  return d;
}

std::vector<int64_t> LoraBDims(const LoraTarget& t, int64_t rank) {
  if (t.kernel.empty()) return {rank, t.out};
  std::vector<int64_t> d{t.out, rank};
  d.resize(2 + t.kernel.size(), 1);
  return d;
}
std::string LoraBName(const std::string& weight) { return weight + ".lora_B"; }

absl::StatusOr<std::vector<LoraTarget>> FindLoraTargets(const Graph& g, const LoraOptions& o) {
  std::optional<std::regex> re;
  try {
    if (!o.targets.empty()) re.emplace(o.targets, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("--lora-targets=", o.targets, ": bad regex: ", e.what()));
  }
  // Each initializer some product reads as its weight, in graph order, with its products.
  struct Candidate {
    LoraTarget target;
    std::string unsupported;
    bool matched = false;
    bool head = false;  // a product reading it is the model's head (IsHead)
  };
  std::vector<Candidate> cands;
  absl::flat_hash_map<const Value*, size_t> index;
  for (const auto& up : g.nodes()) {
    const Node& n = *up;
    std::optional<WeightRead> r = ReadsWeight(n);
    if (!r || n.input(0) == r->weight) continue;
    auto [it, fresh] = index.emplace(r->weight, cands.size());
    if (fresh) {
      Candidate c;
      c.target.weight = r->weight->name;
      const Tensor& w = *r->weight->initializer;
      if (r->conv && w.rank() >= 3) {
        c.target.out = w.dims()[0];
        c.target.in = w.dims()[1];
        c.target.kernel.assign(w.dims().begin() + 2, w.dims().end());
      } else if (w.rank() == 2) {
        c.target.in = w.dims()[r->transposed ? 1 : 0];
        c.target.out = w.dims()[r->transposed ? 0 : 1];
      }
      c.target.transposed = r->transposed;
      c.matched = re && std::regex_match(r->weight->name, *re);
      cands.push_back(std::move(c));
    }
    Candidate& c = cands[it->second];
    c.target.products.push_back(n.name());
    c.head |= IsHead(g, n);
    if (c.unsupported.empty()) c.unsupported = r->unsupported;
    if (c.unsupported.empty() && r->transposed != c.target.transposed)
      c.unsupported = "is read both as it is and transposed";
    if (re && std::regex_match(n.name(), *re)) c.matched = true;
  }
  // A weight also read by something other than a product (a tied embedding's Gather) would have
  // that reader change too once merged.
  for (auto& [v, i] : index) {
    for (const Node* reader : v->consumers)
      if (!ReadAsWeight(*reader, v) && cands[i].unsupported.empty())
        cands[i].unsupported = absl::StrCat("is also read by ", reader->op_type(), " '", reader->name(),
                                            "', not as a product's weight");
  }
  std::vector<LoraTarget> out;
  if (re) {
    for (Candidate& c : cands) {
      if (!c.matched) continue;
      if (!c.unsupported.empty())
        return absl::InvalidArgumentError(
            absl::StrCat("--lora-targets=", o.targets, ": '", c.target.weight, "' ", c.unsupported));
      out.push_back(std::move(c.target));
    }
    if (out.empty())
      return absl::InvalidArgumentError(absl::StrCat(
          "--lora-targets=", o.targets, " matches no weight of a MatMul, Gemm or Conv (nor such a node's name); `mixtrain "
          "check MODEL --lora-rank=R` lists the default targets"));
  } else {
    // The blocks' products: weights whose [in, out] recurs (one per block).
    const auto classes = ClassifyInitializers(g);
    std::map<std::pair<int64_t, int64_t>, int> count;
    auto eligible = [&](const Candidate& c) {
      const Value* v = g.FindValue(c.target.weight);
      return c.unsupported.empty() && !c.head && c.target.kernel.empty() &&
             classes.at(v).role == InitializerRole::kParameter;
    };
    for (const Candidate& c : cands)
      if (eligible(c)) ++count[{c.target.in, c.target.out}];
    for (Candidate& c : cands)
      if (eligible(c) && count[{c.target.in, c.target.out}] >= 2) out.push_back(std::move(c.target));
    if (out.empty())
      return absl::InvalidArgumentError(
          "LoRA: this model has no repeated blocks of 2-D weight products to adapt by default; name the weights "
          "with --lora-targets=REGEX");
  }
  for (const LoraTarget& t : out) {
    if (o.rank <= std::min(LoraFanIn(t), t.out)) continue;
    if (t.kernel.empty())
      return absl::InvalidArgumentError(absl::StrCat("--lora-rank=", o.rank, " is larger than min(in, out) = ",
                                                     std::min(t.in, t.out), " of '", t.weight, "' [in ", t.in,
                                                     ", out ", t.out, "]"));
    return absl::InvalidArgumentError(absl::StrCat(
        "--lora-rank=", o.rank, " is larger than min(in x kernel, out) = ", std::min(LoraFanIn(t), t.out),
        " of the Conv kernel '", t.weight, "' [out ", t.out, ", in ", t.in, ", kernel ", absl::StrJoin(t.kernel, "x"),
        "]"));
  }
  return out;
}

std::unique_ptr<Pass> MakeLoraPass(LoraOptions options) { return std::make_unique<LoraPass>(std::move(options)); }

MT_REGISTER_PASS(lora, [] {
  LoraOptions o;
  o.rank = 8;
  o.alpha = 16;
  return MakeLoraPass(o);
});

absl::Status StoreLoraTargetsLow(Graph& g, const LoraOptions& options, DType low) {
  if (options.rank <= 0) return absl::OkStatus();
  // The targets are checked here whatever the precision, so bad ones are refused before the
  // step is built with the same line in fp32 as under AMP.
  MT_ASSIGN_OR_RETURN(std::vector<LoraTarget> targets, FindLoraTargets(g, options));
  if (!IsLowFloat(low)) return absl::OkStatus();
  for (const LoraTarget& t : targets) {
    Value* w = g.FindValue(t.weight);
    if (w->dtype != DType::kF32) continue;
    // W_low -> Cast(f32) -> every reader of W; the precision pass's Cast back to `low` before
    // the product and this one cancel in cleanup (an exact round trip).
    Value* wide = g.AddValue(g.UniqueName(w->name + "/f32"), DType::kF32, w->shape);
    for (Node* reader : std::vector<Node*>(w->consumers))
      for (size_t i = 0; i < reader->num_inputs(); ++i)
        if (reader->input(i) == w) g.SetInput(reader, i, wide);
    g.SetInitializer(w, ConvertFloat(*w->initializer, low));
    g.AddNode("Cast", {w}, {wide}, g.UniqueName(w->name + "/widen"))->SetAttr(Attribute::Int("to", 1));
  }
  MT_RETURN_IF_ERROR(g.TopoSort());
  return InferShapes(g);
}

absl::Status RestoreLoraTarget(Graph& g, Value* w, Tensor merged) {
  if (w->consumers.size() == 1 && IsWidening(*w->consumers[0])) {
    Node* cast = w->consumers[0];
    Value* wide = cast->output(0);
    g.RemoveNode(cast);
    g.ReplaceAllUsesWith(wide, w);
    g.RemoveValue(wide);
  }
  g.SetInitializer(w, ConvertFloat(merged, DType::kF32));
  return g.TopoSort();
}

std::vector<LoraAdapter> LoraAdapters(const Graph& g) {
  std::vector<LoraAdapter> out;
  for (const Value* v : g.initializers()) {
    auto role = v->metadata.find(kLoraRole);
    if (role == v->metadata.end() || role->second != "A") continue;
    LoraAdapter a;
    a.weight = v->metadata.at(kLoraTarget);
    a.a = v->name;
    a.b = LoraBName(a.weight);
    MT_CHECK(absl::SimpleAtof(v->metadata.at(kLoraScale), &a.scale)) << "bad LoRA scale on " << v->name;
    a.transposed = v->metadata.at(kLoraTransposed) == "1";
    out.push_back(std::move(a));
  }
  return out;
}

absl::StatusOr<Tensor> MergeLoraDelta(const Tensor& w, const Tensor& a, const Tensor& b, float scale,
                                      bool transposed) {
  if (a.dtype() != DType::kF32 || b.dtype() != DType::kF32)
    return absl::InvalidArgumentError("MergeLoraDelta: A and B must be fp32");
  const auto misfit = [&] {
    return absl::InvalidArgumentError(absl::StrCat("MergeLoraDelta: W ", Dims(w.dims()), ", A ", Dims(a.dims()),
                                                   " and B ", Dims(b.dims()), " do not fit"));
  };
  Tensor merged = ConvertFloat(w, DType::kF32).Clone();
  float* m = merged.data_as<float>();
  const float* pa = a.data_as<float>();
  const float* pb = b.data_as<float>();
  if (w.rank() >= 3) {
    // A Conv kernel: W [out, in, k...] += scale · B [out, rank, 1...] · A [rank, in, k...].
    if (a.rank() != w.rank() || b.rank() != w.rank() || b.dims()[0] != w.dims()[0] || b.dims()[1] != a.dims()[0] ||
        !std::equal(a.dims().begin() + 1, a.dims().end(), w.dims().begin() + 1) ||
        b.numel() != b.dims()[0] * b.dims()[1])
      return misfit();
    const int64_t out = w.dims()[0], rank = a.dims()[0], fan_in = a.numel() / rank;
    for (int64_t o = 0; o < out; ++o)
      for (int64_t j = 0; j < fan_in; ++j) {
        double sum = 0;
        for (int64_t r = 0; r < rank; ++r) sum += static_cast<double>(pb[o * rank + r]) * pa[r * fan_in + j];
        m[o * fan_in + j] += static_cast<float>(scale * sum);
      }
    return ConvertFloat(merged, w.dtype());
  }
  if (w.rank() != 2 || a.rank() != 2 || b.rank() != 2) return misfit();
  const int64_t in = a.dims()[0], rank = a.dims()[1], out = b.dims()[1];
  const std::vector<int64_t> want = transposed ? std::vector<int64_t>{out, in} : std::vector<int64_t>{in, out};
  if (b.dims()[0] != rank || w.dims() != want) return misfit();
  for (int64_t i = 0; i < in; ++i)
    for (int64_t j = 0; j < out; ++j) {
      double sum = 0;
      for (int64_t r = 0; r < rank; ++r) sum += static_cast<double>(pa[i * rank + r]) * pb[r * out + j];
      m[transposed ? j * in + i : i * out + j] += static_cast<float>(scale * sum);
    }
  return ConvertFloat(merged, w.dtype());
}

}  // namespace mixtrain
