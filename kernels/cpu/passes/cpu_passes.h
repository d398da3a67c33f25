// The CPU backend's target passes (kernels/cpu/backend.cc adds them to the pipelines through its
// Target, passes/target.h): rewrites that pay only with the CPU's kernels (oneDNN's layouts and
// its products that write a wider type than they read).
#pragma once

#include <cstdint>
#include <memory>

#include "passes/pass.h"

namespace mixtrain {

// --- the training step (after the products are fused) ------------------------------------------

// Products on bf16/fp16 operands whose result is only cast to fp32 (AMP's weight gradients)
// write fp32 themselves (fp32_grad_products.cc): no rounding to the low type, no Cast. The CPU
// backend adds it for bf16 steps only (under fp16 the loss scaler watches the gradients'
// overflow, which an fp32 sum would hide).
std::unique_ptr<Pass> MakeFp32GradProductsPass();

// The step's conv region channel-blocked with `block` channels (16 or 8; other values: no
// change), forward and backward (conv_layout_train.cc).
std::unique_ptr<Pass> MakeConvLayoutTrainingPass(int64_t block);

// The cross-entropy gradient reads AMP's low-type logits and writes its gradient in that type,
// not an fp32 copy and an fp32 gradient cast back (loss_reads_low.cc).
std::unique_ptr<Pass> MakeLossReadsLowPass();

// A gather's weight gradient (a tied embedding's) scatter-added into the weight's other gradient
// in place, not a zeroed table added to it (gather_grad_accumulates.cc).
std::unique_ptr<Pass> MakeGatherGradAccumulatesPass();

// --- the inference pipeline, at positions 45-48 among the registered passes --------------------

// Convolutions and pools channels-last, or channel-blocked where `channel_blocked` (conv_layout.cc).
std::unique_ptr<Pass> MakeConvLayoutPass(bool channel_blocked);
// The Transposes conv_layout puts between two region ops cancelled (conv_transposes.cc).
std::unique_ptr<Pass> MakeConvTransposesPass();
// The last conversion folded into the classifier's weights (conv_flatten_weights.cc).
std::unique_ptr<Pass> MakeConvFlattenWeightsPass();
// A MaxPool after an image's first conv folded into it (conv_pool.cc).
std::unique_ptr<Pass> MakeConvPoolPass();

}  // namespace mixtrain
