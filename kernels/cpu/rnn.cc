// CPU kernels for the recurrent ops RNN, GRU and LSTM (opsets 7-14): forward, reverse and
// bidirectional, both layouts, sequence_lens, initial states, LSTM peepholes, GRU's
// linear_before_reset, clip, and the activations Sigmoid/Tanh/Relu (the defaults and the common
// choices). Shape rule: graph/ops/onnx_coverage_ops.cc.
//
// Plain loops in double: these ops appear in the conformance suite and in small sequence models,
// and the recurrence is sequential anyway. Gate order follows ONNX: LSTM i, o, f, c; GRU z, r, h.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/elementwise_loops.h"
#include "kernels/cpu/reduce_util.h"

namespace mixtrain::cpu {
namespace {

enum class Cell { kRnn, kGru, kLstm };

using Act = double (*)(double);
double SigmoidD(double x) { return 1 / (1 + std::exp(-x)); }
double TanhD(double x) { return std::tanh(x); }
double ReluD(double x) { return x > 0 ? x : 0; }

absl::StatusOr<Act> ActOf(const KernelContext& ctx, const std::string& name) {
  if (name == "Sigmoid") return SigmoidD;
  if (name == "Tanh") return TanhD;
  if (name == "Relu") return ReluD;
  return ctx.Error(absl::StrCat("unsupported activation '", name, "'"));
}

absl::StatusOr<std::vector<double>> Doubles(const KernelContext& ctx, const TensorView* t) {
  std::vector<double> v;
  if (t == nullptr) return v;
  v.resize(t->numel());
  MT_RETURN_IF_ERROR(cpu_ew::CastBuffer(ctx, t->dtype, t->data, DType::kF64, v.data(), t->numel()));
  return v;
}

absl::Status Store(const KernelContext& ctx, const std::vector<double>& v, TensorView* t) {
  if (t == nullptr) return absl::OkStatus();
  if (static_cast<int64_t>(v.size()) != t->numel()) return ctx.Error("output size mismatch");
  return cpu_ew::CastBuffer(ctx, DType::kF64, v.data(), t->dtype, t->data, t->numel());
}

template <Cell kCell>
absl::Status RecurrentKernel(KernelContext& ctx) {
  constexpr int G = kCell == Cell::kRnn ? 1 : (kCell == Cell::kGru ? 3 : 4);
  const Node& node = ctx.node();
  const TensorView* xt = ctx.input(0);
  const TensorView* wt = ctx.input(1);
  const TensorView* rt = ctx.input(2);
  if (xt == nullptr || wt == nullptr || rt == nullptr || xt->rank() != 3 || wt->rank() != 3 ||
      rt->rank() != 3)
    return ctx.Error("needs X, W and R of rank 3");
  const bool batch_major = node.attr_int("layout", 0) != 0;
  const int64_t seq = xt->dims[batch_major ? 1 : 0], batch = xt->dims[batch_major ? 0 : 1];
  const int64_t in = xt->dims[2], hid = rt->dims[2], dirs = wt->dims[0];
  const std::string direction = node.attr_string("direction", "forward");
  if (dirs != (direction == "bidirectional" ? 2 : 1) || wt->dims[1] != G * hid || wt->dims[2] != in ||
      rt->dims[0] != dirs || rt->dims[1] != G * hid)
    return ctx.Error("W and R do not match X, hidden_size and direction");
  if (node.attr_int("input_forget", 0) != 0) return ctx.Error("input_forget=1 is not supported");
  const bool linear_before_reset = node.attr_int("linear_before_reset", 0) != 0;
  const bool clip_on = node.has_attr("clip");
  const double clip = node.attr_float("clip", 0);

  // Activations: per direction, f (and g, h) in ONNX order, defaults by cell type.
  std::vector<std::string> names;
  if (const Attribute* a = node.attr("activations")) names = a->strings;
  const std::vector<std::string> dflt =
      kCell == Cell::kRnn ? std::vector<std::string>{"Tanh"}
      : kCell == Cell::kGru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                            : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  const size_t per_dir = dflt.size();
  std::vector<Act> acts;
  for (int64_t d = 0; d < dirs; ++d)
    for (size_t k = 0; k < per_dir; ++k) {
      const size_t at = d * per_dir + k;
      MT_ASSIGN_OR_RETURN(Act f, ActOf(ctx, at < names.size() ? names[at] : dflt[k]));
      acts.push_back(f);
    }

  MT_ASSIGN_OR_RETURN(std::vector<double> x, Doubles(ctx, xt));
  MT_ASSIGN_OR_RETURN(std::vector<double> w, Doubles(ctx, wt));
  MT_ASSIGN_OR_RETURN(std::vector<double> r, Doubles(ctx, rt));
  MT_ASSIGN_OR_RETURN(std::vector<double> b, Doubles(ctx, ctx.input(3)));
  MT_ASSIGN_OR_RETURN(std::vector<double> h0, Doubles(ctx, ctx.input(5)));
  MT_ASSIGN_OR_RETURN(std::vector<double> c0, Doubles(ctx, kCell == Cell::kLstm ? ctx.input(6) : nullptr));
  MT_ASSIGN_OR_RETURN(std::vector<double> p, Doubles(ctx, kCell == Cell::kLstm ? ctx.input(7) : nullptr));
  std::vector<int64_t> lens(batch, seq);
  if (const TensorView* l = ctx.input(4)) {
    if (l->numel() != batch) return ctx.Error("sequence_lens must have one entry per batch");
    for (int64_t i = 0; i < batch; ++i) lens[i] = IntAt(*l, i);
  }
  if ((!b.empty() && static_cast<int64_t>(b.size()) != dirs * 2 * G * hid) ||
      (!h0.empty() && static_cast<int64_t>(h0.size()) != dirs * batch * hid) ||
      (!c0.empty() && static_cast<int64_t>(c0.size()) != dirs * batch * hid) ||
      (!p.empty() && static_cast<int64_t>(p.size()) != dirs * 3 * hid))
    return ctx.Error("B, initial_h, initial_c or P has the wrong size");

  auto xat = [&](int64_t t, int64_t n) { return x.data() + (batch_major ? n * seq + t : t * batch + n) * in; };
  // Y [seq, dirs, batch, hid] (layout 0) or [batch, seq, dirs, hid]; Y_h/Y_c [dirs, batch, hid]
  // or [batch, dirs, hid].
  std::vector<double> y(seq * dirs * batch * hid, 0.0), yh(dirs * batch * hid), yc(dirs * batch * hid);
  auto yat = [&](int64_t t, int64_t d, int64_t n) {
    return y.data() + (batch_major ? ((n * seq + t) * dirs + d) : ((t * dirs + d) * batch + n)) * hid;
  };
  auto state_at = [&](int64_t d, int64_t n) { return (batch_major ? n * dirs + d : d * batch + n) * hid; };
  auto clipped = [&](double v) { return clip_on ? std::min(std::max(v, -clip), clip) : v; };

  std::vector<double> gx(G * hid), gh(G * hid), hprev(hid), cprev(hid), hnew(hid), reset(hid);
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const double* W = w.data() + d * G * hid * in;
    const double* R = r.data() + d * G * hid * hid;
    const double* Wb = b.empty() ? nullptr : b.data() + d * 2 * G * hid;
    const double* Rb = Wb == nullptr ? nullptr : Wb + G * hid;
    const double* P = p.empty() ? nullptr : p.data() + d * 3 * hid;
    const Act f = acts[d * per_dir], g = per_dir > 1 ? acts[d * per_dir + 1] : f,
              hact = per_dir > 2 ? acts[d * per_dir + 2] : f;
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t j = 0; j < hid; ++j) {
        hprev[j] = h0.empty() ? 0 : h0[state_at(d, n) + j];
        cprev[j] = c0.empty() ? 0 : c0[state_at(d, n) + j];
      }
      const int64_t len = std::min(lens[n], seq);
      for (int64_t s = 0; s < len; ++s) {
        const int64_t t = reverse ? len - 1 - s : s;
        const double* xv = xat(t, n);
        for (int64_t q = 0; q < G * hid; ++q) {
          double ax = Wb ? Wb[q] : 0, ah = Rb ? Rb[q] : 0;
          for (int64_t k = 0; k < in; ++k) ax += W[q * in + k] * xv[k];
          for (int64_t k = 0; k < hid; ++k) ah += R[q * hid + k] * hprev[k];
          gx[q] = ax;
          gh[q] = ah;
        }
        if constexpr (kCell == Cell::kGru)
          for (int64_t k = 0; k < hid; ++k) reset[k] = f(clipped(gx[hid + k] + gh[hid + k]));
        for (int64_t j = 0; j < hid; ++j) {
          if constexpr (kCell == Cell::kRnn) {
            hnew[j] = f(clipped(gx[j] + gh[j]));
          } else if constexpr (kCell == Cell::kGru) {
            const double z = f(clipped(gx[j] + gh[j]));
            const double rr = reset[j];
            double hh;
            if (linear_before_reset) {
              hh = gx[2 * hid + j] + rr * gh[2 * hid + j];
            } else {
              // (r . H) R_h^T: the recurrent part again, with the reset-gated state.
              hh = gx[2 * hid + j] + (Rb ? Rb[2 * hid + j] : 0);
              for (int64_t k = 0; k < hid; ++k) hh += R[(2 * hid + j) * hid + k] * reset[k] * hprev[k];
            }
            const double ht = g(clipped(hh));
            hnew[j] = (1 - z) * ht + z * hprev[j];
          } else {
            const double i = f(clipped(gx[j] + gh[j] + (P ? P[j] * cprev[j] : 0)));
            const double fg = f(clipped(gx[2 * hid + j] + gh[2 * hid + j] + (P ? P[2 * hid + j] * cprev[j] : 0)));
            const double c = g(clipped(gx[3 * hid + j] + gh[3 * hid + j]));
            const double cn = fg * cprev[j] + i * c;
            const double o = f(clipped(gx[hid + j] + gh[hid + j] + (P ? P[hid + j] * cn : 0)));
            hnew[j] = o * hact(cn);
            cprev[j] = cn;
          }
        }
        hprev = hnew;
        std::copy(hprev.begin(), hprev.end(), yat(t, d, n));
      }
      std::copy(hprev.begin(), hprev.end(), yh.begin() + state_at(d, n));
      std::copy(cprev.begin(), cprev.end(), yc.begin() + state_at(d, n));
    }
  }
  MT_RETURN_IF_ERROR(Store(ctx, y, ctx.output(0)));
  MT_RETURN_IF_ERROR(Store(ctx, yh, ctx.output(1)));
  if constexpr (kCell == Cell::kLstm) MT_RETURN_IF_ERROR(Store(ctx, yc, ctx.output(2)));
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_KERNELS(cpu_rnn) {
  const auto cpu = DeviceType::kCPU;
  const std::vector<DType> f = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64};
  r.Register({"RNN", "", cpu, f, 0, FnKernel(RecurrentKernel<Cell::kRnn>)});
  r.Register({"GRU", "", cpu, f, 0, FnKernel(RecurrentKernel<Cell::kGru>)});
  r.Register({"LSTM", "", cpu, f, 0, FnKernel(RecurrentKernel<Cell::kLstm>)});
}

}  // namespace mixtrain::cpu
