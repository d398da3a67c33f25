// The precision pass (assign each float node fp32 or the low type, insert Casts at the
// boundaries), the cast cleanup pass, and the precision report `dump` prints.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "passes/pass.h"
#include "passes/precision_policy.h"

namespace mixtrain {

// The dtype each float-computing node should run in under `policy` (nodes of class kFixed and
// nodes with no float input or output are absent). Pure: the graph is not changed.
std::map<const Node*, DType> AssignPrecision(const Graph& g, const PrecisionPolicy& policy);

// Rewrites the graph by AssignPrecision: casts inputs (once per value and type, so a weight's
// low copy is made once per step and shared), retypes float outputs, keeps every graph output's
// dtype (a Cast back under the original name), and annotates nodes with "precision".
std::unique_ptr<Pass> MakePrecisionPass(PrecisionPolicy policy);

// Folds exact Cast round trips (Cast(Cast(x, f32), f16) => x for x in f16; casts to a value's own
// type), dedupes casts of one value, CSE, DCE. Never folds f32->f16->f32: that rounding is real.
std::unique_ptr<Pass> MakeCleanupPass();

// "precision: 12 nodes f16, 5 f32; FLOPs/sample: f16 2.3M (97%), f32 70K; casts inserted: 6".
std::string PrecisionReportText(const Graph& g);

}  // namespace mixtrain
