// Per-element optimizer updates, written once for the CPU loop and the CUDA kernel. Parameters,
// gradients and moments are fp32 (master weights and optimizer state always are); `skip` leaves
// every state untouched (a step with an inf/NaN gradient).
#pragma once

#include <cmath>

#include "graph/half.h"

namespace mixtrain {

// Adam / AdamW as torch.optim: Adam adds weight_decay*x to the gradient (L2); AdamW decays the
// weight directly (decoupled). `t` is the 1-based step number of this update.
struct AdamStep {
  float lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  float bias1, bias2_sqrt;  // 1 - beta1^t, sqrt(1 - beta2^t), computed once per step

  MT_HD void operator()(float& x, float g, float& m, float& v) const {
    if (decoupled) {
      Update<true>(x, g, m, v);
    } else {
      Update<false>(x, g, m, v);
    }
  }
  // The step with the weight-decay form fixed at compile time, for loops that vectorize.
  template <bool kDecoupled>
  MT_HD void Update(float& x, float g, float& m, float& v) const {
    if (kDecoupled) {
      x -= lr * weight_decay * x;
    } else {
      g += weight_decay * x;
    }
    m = beta1 * m + (1.0f - beta1) * g;
    v = beta2 * v + (1.0f - beta2) * g * g;
    float denom = std::sqrt(v) / bias2_sqrt + eps;
    x -= (lr / bias1) * m / denom;
  }
};

// SGD as torch.optim.SGD (dampening 0): g += wd*x; b = momentum*b + g; x -= lr*(nesterov ?
// g + momentum*b : b). With momentum 0 the buffer is unused.
struct SgdStep {
  float lr, momentum, weight_decay;
  bool nesterov;

  MT_HD void operator()(float& x, float g, float* b) const {
    g += weight_decay * x;
    if (momentum != 0.0f) {
      *b = momentum * *b + g;
      g = nesterov ? g + momentum * *b : *b;
    }
    x -= lr * g;
  }
};

// Adagrad as torch.optim.Adagrad: clr = lr / (1 + (t-1)*lr_decay); h += g^2;
// x -= clr * g / (sqrt(h) + eps).
struct AdagradStep {
  float clr, weight_decay, eps;

  MT_HD void operator()(float& x, float g, float& h) const {
    g += weight_decay * x;
    h += g * g;
    x -= clr * g / (std::sqrt(h) + eps);
  }
};

// ONNX ai.onnx.preview.training semantics (their reference implementations).
struct OnnxAdamStep {
  float r_adjusted, alpha, beta, epsilon, norm_coefficient, norm_coefficient_post;
  MT_HD void operator()(float x, float g, float v, float h, float& x_new, float& v_new,
                        float& h_new) const {
    float gr = norm_coefficient * x + g;
    v_new = alpha * v + (1.0f - alpha) * gr;
    h_new = beta * h + (1.0f - beta) * gr * gr;
    float xn = x - r_adjusted * (v_new / (std::sqrt(h_new) + epsilon));
    x_new = (1.0f - norm_coefficient_post) * xn;
  }
};

struct OnnxMomentumStep {
  float r, alpha, beta_adjusted, norm_coefficient;
  bool nesterov;
  MT_HD void operator()(float x, float g, float v, float& x_new, float& v_new) const {
    float gr = norm_coefficient * x + g;
    v_new = alpha * v + beta_adjusted * gr;
    x_new = nesterov ? x - r * (gr + alpha * v_new) : x - r * v_new;
  }
};

struct OnnxAdagradStep {
  float r_adjusted, epsilon, norm_coefficient;
  MT_HD void operator()(float x, float g, float h, float& x_new, float& h_new) const {
    float gr = norm_coefficient * x + g;
    h_new = h + gr * gr;
    x_new = x - r_adjusted * gr / (std::sqrt(h_new) + epsilon);
  }
};

// GradScaler's update: back off on overflow, grow after `interval` clean steps in a row.
struct LossScaleUpdate {
  float growth, backoff, max_scale;
  int64_t interval;
  MT_HD void operator()(bool found_inf, float& scale, int64_t& good) const {
    if (found_inf) {
      scale *= backoff;
      good = 0;
      return;
    }
    if (++good >= interval) {
      float grown = scale * growth;
      scale = grown > max_scale ? max_scale : grown;
      good = 0;
    }
  }
};

}  // namespace mixtrain
