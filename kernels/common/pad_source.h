// Pad's index map along one dim, shared by the CPU kernels (kernels/cpu/movement_util.h: Pad and
// PadGrad) and the CUDA ones (kernels/cuda/pad_slice*.{cu,cc}), so forward, backward and both
// devices cannot disagree.
#pragma once

#include <cstdint>
#include <string_view>

#include "graph/half.h"  // MT_HD

namespace mixtrain::pad {

enum Mode : int { kConstant = 0, kEdge = 1, kReflect = 2, kWrap = 3, kUnknown = -1 };

inline Mode ModeOf(std::string_view name) {
  if (name == "constant") return kConstant;
  if (name == "edge") return kEdge;
  if (name == "reflect") return kReflect;
  if (name == "wrap") return kWrap;
  return kUnknown;
}

// The source index for output index o (pads `begin` before, n input elements), or -1 for the
// constant fill.
MT_HD int64_t Source(int mode, int64_t o, int64_t begin, int64_t n) {
  int64_t i = o - begin;
  if (i >= 0 && i < n) return i;
  if (mode == kConstant || n == 0) return -1;
  if (mode == kEdge) return i < 0 ? 0 : n - 1;
  if (mode == kWrap) return ((i % n) + n) % n;
  if (n == 1) return 0;  // reflect
  const int64_t period = 2 * (n - 1);
  i = ((i % period) + period) % period;
  return i < n ? i : period - i;
}

}  // namespace mixtrain::pad
