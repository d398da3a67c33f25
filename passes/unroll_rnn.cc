// unroll_rnn (training; the first forward rewrite, before autodiff): an ONNX RNN, GRU or LSTM
// node whose sequence length is static becomes its recurrence written out in plain ONNX ops, so
// autodiff differentiates it like the rest of the graph, the precision pass puts its products in
// the low type, and every backend that runs MatMul and the activations trains it. This is what
// torch.onnx.export writes for nn.RNN/nn.GRU/nn.LSTM (with the weights re-ordered into ONNX's
// gate order by Slice/Concat of the parameters, which autodiff then reverses).
//
// Per direction: one MatMul of the whole sequence with W^T (plus both biases, folded in once),
// split into time steps; then per step one MatMul of the state with R^T, the gates and the
// state update, in ONNX's equations (gate order LSTM i,o,f,c; GRU z,r,h; peepholes; clip on the
// activations' inputs; GRU's linear_before_reset either way). Absent initial states are zeros
// that are never materialized: the first step simply has no recurrent term. Y, Y_h and Y_c are
// Concats of the step states in either layout; the node's output values keep their names. The
// zero second half tf2onnx gives B for Keras's one bias stays out (ExporterZeroRb): what trains is
// what Keras trains.
//
// Left for the kernel (and autodiff's "no gradient rule" error): a symbolic sequence length (the
// unrolled graph has one block per step), a sequence_lens input, input_forget=1, activations
// other than Sigmoid/Tanh/Relu (the kernel's set).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/shape_inference.h"
#include "passes/grad_builder.h"
#include "passes/parameters.h"
#include "passes/pass_registry.h"
#include "passes/training.h"

namespace mixtrain {
namespace {

using V = Value*;

enum class Cell { kRnn, kGru, kLstm };

struct Rnn {
  Node* node = nullptr;
  Cell cell = Cell::kLstm;
  int gates = 4;
  int64_t seq = 0, input = 0, hidden = 0, dirs = 1;
  bool batch_major = false, reverse_only = false, linear_before_reset = false, clip_on = false;
  float clip = 0;
  std::vector<std::string> acts;  // per direction, f (g, h) in ONNX order
  // Per direction: B's recurrent half (Rb) is the exporter's zero, not a parameter of the
  // framework's cell (ExporterZeroRb), so it stays out of the computation.
  std::vector<bool> exporter_zero_rb;
};

V In(const Node& n, size_t i) { return i < n.num_inputs() ? n.input(i) : nullptr; }

// Why `n` cannot be unrolled, or "" (and `r` filled) when it can.
std::string Check(const Node& n, Rnn* r) {
  r->node = const_cast<Node*>(&n);
  r->cell = n.op_type() == "RNN" ? Cell::kRnn : n.op_type() == "GRU" ? Cell::kGru : Cell::kLstm;
  r->gates = r->cell == Cell::kRnn ? 1 : r->cell == Cell::kGru ? 3 : 4;
  V x = In(n, 0), w = In(n, 1), rr = In(n, 2);
  if (x == nullptr || w == nullptr || rr == nullptr) return "X, W or R is missing";
  if (!x->shape.rank_known || x->shape.rank() != 3 || !w->shape.fully_known() || w->shape.rank() != 3 ||
      !rr->shape.fully_known() || rr->shape.rank() != 3)
    return "the shapes of X, W and R are not known statically";
  r->batch_major = n.attr_int("layout", 0) != 0;
  const Dim seq = x->shape.dims[r->batch_major ? 1 : 0];
  if (!seq.known())
    return absl::StrCat("the sequence length is not static (X is ", x->shape.ToString(),
                        "); export with a fixed sequence length");
  if (!x->shape.dims[2].known()) return "X's input size is not static";
  r->seq = seq.value;
  r->input = x->shape.dims[2].value;
  r->dirs = w->shape.dims[0].value;
  r->hidden = rr->shape.dims[2].value;
  const std::string direction = n.attr_string("direction", "forward");
  r->reverse_only = direction == "reverse";
  if (r->dirs != (direction == "bidirectional" ? 2 : 1) || w->shape.dims[1].value != r->gates * r->hidden ||
      w->shape.dims[2].value != r->input || rr->shape.dims[0].value != r->dirs ||
      rr->shape.dims[1].value != r->gates * r->hidden)
    return "W and R do not match X, the hidden size and the direction";
  if (r->seq < 1) return "the sequence is empty";
  if (In(n, 4) != nullptr) return "it has a sequence_lens input";
  if (n.attr_int("input_forget", 0) != 0) return "input_forget=1";
  r->linear_before_reset = n.attr_int("linear_before_reset", 0) != 0;
  r->clip_on = n.has_attr("clip");
  r->clip = n.attr_float("clip", 0);
  std::vector<std::string> names;
  if (const Attribute* a = n.attr("activations")) names = a->strings;
  const std::vector<std::string> dflt = r->cell == Cell::kRnn   ? std::vector<std::string>{"Tanh"}
                                        : r->cell == Cell::kGru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                                : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  for (int64_t d = 0; d < r->dirs; ++d)
    for (size_t k = 0; k < dflt.size(); ++k) {
      const size_t at = d * dflt.size() + k;
      const std::string& a = at < names.size() ? names[at] : dflt[k];
      if (a != "Sigmoid" && a != "Tanh" && a != "Relu") return absl::StrCat("its activation ", a);
      r->acts.push_back(a);
    }
  return "";
}

// tf2onnx writes a Keras LSTM (and any cell it turns into an ONNX RNN, or GRU with
// reset_after=False) as an ONNX node whose B holds the layer's one bias in its first half (Wb) and
// zeros of its own in the second (Rb).
// Where the cell only ever adds Wb + Rb (LSTM, RNN, GRU without linear_before_reset) ONNX has two
// parameters for Keras's one: training both steps the sum twice (a Conv1D+LSTM net drifted 1.5e-3
// off Keras's trajectory in 8 Adam steps). Such an Rb is left out of the unrolled computation, so
// its gradient is zero and it stays the zero it is, under every optimizer. Not so for GRU with
// linear_before_reset (Keras's reset_after=True), whose Rb sits inside the reset gate, nor for
// exports of frameworks with two biases per cell (torch's b_ih and b_hh both train).
std::vector<bool> ExporterZeroRb(const Graph& g, const Rnn& r) {
  std::vector<bool> out(r.dirs, false);
  const Value* b = In(*r.node, 3);
  if (g.producer_name != "tf2onnx" || b == nullptr || !b->is_initializer() || b->dtype != DType::kF32 ||
      (r.cell == Cell::kGru && r.linear_before_reset))
    return out;
  const Tensor& t = *b->initializer;
  const int64_t half = r.gates * r.hidden;
  if (t.numel() != r.dirs * 2 * half) return out;
  const float* p = t.data_as<float>();
  for (int64_t d = 0; d < r.dirs; ++d)
    out[d] = std::all_of(p + (2 * d + 1) * half, p + (2 * d + 2) * half, [](float x) { return x == 0.0f; });
  return out;
}

class Unroller {
 public:
  Unroller(Graph& g, const Rnn& r) : g_(g), b_(g), r_(r) {
    b_.set_scope(absl::StrCat(r.node->name(), "/unroll"));
    dtype_ = In(*r.node, 0)->dtype;
  }

  // Builds the unrolled graph for the node's live outputs; returns them (nullptr where dead).
  std::vector<V> Build(const std::vector<bool>& live) {
    const Node& n = *r_.node;
    const int64_t G = r_.gates, H = r_.hidden, D = r_.dirs, T = r_.seq;
    V x = In(n, 0);
    if (r_.batch_major) x = b_.Op("Transpose", {x}, {Attribute::Ints("perm", {1, 0, 2})});
    std::vector<V> w = PerDirection(In(n, 1), 0, {G * H, r_.input});
    std::vector<V> rw = PerDirection(In(n, 2), 0, {G * H, H});
    std::vector<V> bias = PerDirection(In(n, 3), 0, {2 * G * H});
    std::vector<V> h0 = PerDirection(In(n, 5), r_.batch_major ? 1 : 0, {-1, H});
    std::vector<V> c0 = PerDirection(r_.cell == Cell::kLstm ? In(n, 6) : nullptr, r_.batch_major ? 1 : 0, {-1, H});
    std::vector<V> peep = PerDirection(r_.cell == Cell::kLstm ? In(n, 7) : nullptr, 0, {3 * H});

    std::vector<std::vector<V>> ys(D);
    std::vector<V> h_last(D), c_last(D);
    for (int64_t d = 0; d < D; ++d) {
      const bool reverse = r_.reverse_only || d == 1;
      const std::string* act = &r_.acts[d * (r_.cell == Cell::kRnn ? 1 : r_.cell == Cell::kGru ? 2 : 3)];
      V xw = b_.Op("MatMul", {x, T_(w[d])});  // [T, N, G*H]
      V rb = nullptr;  // the recurrent bias added per step (GRU), else folded into xw
      if (bias[d] != nullptr && r_.exporter_zero_rb[d]) {
        xw = b_.Add(xw, Split(bias[d], 0, {G * H, G * H})[0]);
      } else if (bias[d] != nullptr) {
        std::vector<V> wr = Split(bias[d], 0, {G * H, G * H});
        if (r_.cell == Cell::kGru) {
          xw = b_.Add(xw, wr[0]);
          rb = wr[1];
        } else {
          xw = b_.Add(xw, b_.Add(wr[0], wr[1]));
        }
      }
      std::vector<V> steps = Split(xw, 0, std::vector<int64_t>(T, 1));
      // GRU without linear_before_reset multiplies r.H (not H) by R_h: R split by rows.
      V rt = nullptr, rt_zr = nullptr, rt_h = nullptr, rb_zr = nullptr, rb_h = nullptr;
      if (r_.cell == Cell::kGru && !r_.linear_before_reset) {
        std::vector<V> rows = Split(rw[d], 0, {2 * H, H});
        rt_zr = T_(rows[0]);
        rt_h = T_(rows[1]);
        if (rb != nullptr) {
          std::vector<V> parts = Split(rb, 0, {2 * H, H});
          rb_zr = parts[0];
          rb_h = parts[1];
        }
      } else {
        rt = T_(rw[d]);
      }
      std::vector<V> p;  // peepholes i, o, f
      if (peep[d] != nullptr) p = Split(peep[d], 0, {H, H, H});
      V h = h0[d], c = c0[d];
      ys[d].assign(T, nullptr);
      for (int64_t s = 0; s < T; ++s) {
        const int64_t t = reverse ? T - 1 - s : s;
        V a = b_.Op("Reshape", {steps[t], b_.Ints({-1, G * H})});  // [N, G*H]
        if (r_.cell == Cell::kRnn) {
          h = Act(act[0], Clip(Add(a, MatMul(h, rt))));
        } else if (r_.cell == Cell::kLstm) {
          std::vector<V> q = Split(Add(a, MatMul(h, rt)), 1, {H, H, H, H});  // i, o, f, c
          V pi = p.empty() ? nullptr : p[0], po = p.empty() ? nullptr : p[1], pf = p.empty() ? nullptr : p[2];
          V i = Act(act[0], Clip(Add(q[0], Mul(pi, c))));
          V f = Act(act[0], Clip(Add(q[2], Mul(pf, c))));
          V cand = Act(act[1], Clip(q[3]));
          c = Add(Mul(f, c), b_.Mul(i, cand));
          V o = Act(act[0], Clip(Add(q[1], Mul(po, c))));
          h = b_.Mul(o, Act(act[2], c));
        } else {
          std::vector<V> xg = Split(a, 1, {H, H, H});  // z, r, h
          V hz = nullptr, hr = nullptr, hh = nullptr;
          if (r_.linear_before_reset) {
            V rec = Add(MatMul(h, rt), rb);  // [N, 3H], or the bias alone at a zero state
            if (rec != nullptr) {
              std::vector<V> parts = Split(rec, Rank(rec) - 1, {H, H, H});
              hz = parts[0], hr = parts[1], hh = parts[2];
            }
          } else {
            V rec = Add(MatMul(h, rt_zr), rb_zr);
            if (rec != nullptr) {
              std::vector<V> parts = Split(rec, Rank(rec) - 1, {H, H});
              hz = parts[0], hr = parts[1];
            }
          }
          V z = Act(act[0], Clip(Add(xg[0], hz)));
          V reset = Act(act[0], Clip(Add(xg[1], hr)));
          V pre = r_.linear_before_reset ? Add(xg[2], Mul(reset, hh))
                                         : Add(Add(xg[2], MatMul(Mul(reset, h), rt_h)), rb_h);
          V cand = Act(act[1], Clip(pre));
          // (1 - z) cand + z h = cand + z (h - cand)
          h = h == nullptr ? b_.Sub(cand, b_.Mul(z, cand)) : b_.Add(cand, b_.Mul(z, b_.Sub(h, cand)));
        }
        ys[d][t] = h;
      }
      h_last[d] = h;
      c_last[d] = c;
    }

    std::vector<V> out(3, nullptr);
    if (live[0]) {  // Y: [T, D, N, H], or [N, T, D, H]
      std::vector<V> per_dir;
      for (int64_t d = 0; d < D; ++d) {
        std::vector<V> steps;
        for (V y : ys[d]) steps.push_back(b_.Op("Reshape", {y, b_.Ints({1, 1, -1, H})}));
        per_dir.push_back(b_.Op("Concat", steps, {Attribute::Int("axis", 0)}));
      }
      out[0] = b_.Op("Concat", per_dir, {Attribute::Int("axis", 1)});
      if (r_.batch_major) out[0] = b_.Op("Transpose", {out[0]}, {Attribute::Ints("perm", {2, 0, 1, 3})});
    }
    for (int k = 1; k <= 2; ++k) {  // Y_h, Y_c: [D, N, H], or [N, D, H]
      if (!live[k]) continue;
      std::vector<V> states;
      for (int64_t d = 0; d < D; ++d) {
        V s = k == 1 ? h_last[d] : c_last[d];
        states.push_back(b_.Op("Reshape", {s, b_.Ints({1, -1, H})}));
      }
      out[k] = b_.Op("Concat", states, {Attribute::Int("axis", 0)});
      if (r_.batch_major) out[k] = b_.Op("Transpose", {out[k]}, {Attribute::Ints("perm", {1, 0, 2})});
    }
    return out;
  }

 private:
  static int64_t Rank(V v) { return v->shape.rank_known ? v->shape.rank() : 1; }

  // v (leading dim, or dim `axis`, = directions) as one tensor per direction of shape `shape`.
  std::vector<V> PerDirection(V v, int64_t axis, std::vector<int64_t> shape) {
    std::vector<V> out(r_.dirs, nullptr);
    if (v == nullptr) return out;
    std::vector<V> parts = r_.dirs == 1 ? std::vector<V>{v} : Split(v, axis, std::vector<int64_t>(r_.dirs, 1));
    for (int64_t d = 0; d < r_.dirs; ++d) out[d] = b_.Op("Reshape", {parts[d], b_.Ints(shape)});
    return out;
  }

  // Split along `axis` into pieces of `sizes`, in the graph's opset's form.
  std::vector<V> Split(V x, int64_t axis, const std::vector<int64_t>& sizes) {
    std::vector<bool> wanted(sizes.size(), true);
    if (b_.opset() >= 13)
      return b_.OpN("Split", {x, b_.Ints(sizes)}, wanted, {Attribute::Int("axis", axis)});
    return b_.OpN("Split", {x}, wanted, {Attribute::Int("axis", axis), Attribute::Ints("split", sizes)});
  }

  V T_(V m) { return b_.Op("Transpose", {m}, {Attribute::Ints("perm", {1, 0})}); }

  // Arithmetic where nullptr is a zero that was never materialized (an absent initial state).
  V Add(V a, V c) { return a == nullptr ? c : c == nullptr ? a : b_.Add(a, c); }
  V Mul(V a, V c) { return a == nullptr || c == nullptr ? nullptr : b_.Mul(a, c); }
  V MatMul(V h, V m) { return h == nullptr ? nullptr : b_.Op("MatMul", {h, m}); }

  V Act(const std::string& name, V x) { return b_.Op(name, {x}); }

  V Clip(V x) {
    if (!r_.clip_on) return x;
    if (b_.opset() >= 11) {
      if (clip_lo_ == nullptr) {
        clip_lo_ = b_.Scalar(-r_.clip, dtype_);
        clip_hi_ = b_.Scalar(r_.clip, dtype_);
        clip_lo_->metadata[kFoldedMetadata] = clip_hi_->metadata[kFoldedMetadata] = kPassConstant;  // never trained
      }
      return b_.Op("Clip", {x, clip_lo_, clip_hi_});
    }
    return b_.Op("Clip", {x}, {Attribute::Float("min", -r_.clip), Attribute::Float("max", r_.clip)});
  }

  Graph& g_;
  GradBuilder b_;
  const Rnn& r_;
  DType dtype_ = DType::kF32;
  V clip_lo_ = nullptr, clip_hi_ = nullptr;
};

class UnrollRnnPass final : public Pass {
 public:
  absl::string_view name() const override { return "unroll_rnn"; }

  absl::StatusOr<bool> Run(Graph& g) override {
    std::vector<Rnn> todo;
    for (const auto& n : g.nodes()) {
      if (!IsRecurrentOp(*n)) continue;
      if (todo.empty()) MT_RETURN_IF_ERROR(InferShapes(g));
      Rnn r;
      if (!Check(*n, &r).empty()) continue;
      r.exporter_zero_rb = ExporterZeroRb(g, r);
      todo.push_back(std::move(r));
    }
    for (const Rnn& r : todo) {
      Node* n = r.node;
      std::vector<Value*> olds(3, nullptr);
      std::vector<bool> live(3, false);
      for (size_t i = 0; i < n->num_outputs() && i < 3; ++i) {
        olds[i] = n->output(i);
        live[i] = olds[i] != nullptr && (!olds[i]->consumers.empty() || g.IsGraphOutput(olds[i]));
      }
      // W, R and B keep their role (passes/parameters.cc) once the node that read them is gone.
      for (size_t i = 1; i < 4 && i < n->num_inputs(); ++i)
        if (Value* w = n->input(i); w != nullptr && w->is_initializer())
          w->metadata[kRecurrentWeightMetadata] = i == 1 ? "W" : i == 2 ? "R" : "B";
      Unroller u(g, r);
      std::vector<Value*> built = u.Build(live);
      g.RemoveNode(n);
      // The last node of each output writes the node's old value, so its name and its uses stay.
      for (int k = 0; k < 3; ++k) {
        if (!live[k]) continue;
        Node* p = built[k]->producer;
        MT_CHECK(p != nullptr) << "unroll_rnn: output " << k << " was not computed";
        g.SetNodeOutput(p, built[k]->producer_output, olds[k]);
      }
    }
    if (todo.empty()) return false;
    MT_RETURN_IF_ERROR(g.TopoSort());
    MT_RETURN_IF_ERROR(InferShapes(g));
    return true;
  }
};

}  // namespace

bool IsRecurrentOp(const Node& n) {
  return n.domain().empty() && (n.op_type() == "RNN" || n.op_type() == "GRU" || n.op_type() == "LSTM");
}

// Why a recurrent node stays as it is (for autodiff's error), or "" when unroll_rnn unrolls it.
std::string WhyRnnNotUnrolled(const Node& n) {
  Rnn r;
  return Check(n, &r);
}

std::unique_ptr<Pass> MakeUnrollRnnPass() { return std::make_unique<UnrollRnnPass>(); }

MT_REGISTER_PASS(unroll_rnn, [] { return MakeUnrollRnnPass(); });

}  // namespace mixtrain
