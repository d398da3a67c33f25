// The precision debugger on the command line: the end-of-run table, the skipped-step line, the
// statistics file (`train --debug-precision-out`, read back by `dump --stats` and
// `suggest-policy`), each value's risk, and the policy suggested from them.
#pragma once

#include <cstdio>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "mixtrain/trainer.h"

namespace mixtrain::cli {

// How close a value came to losing its numbers in its dtype, worst first.
enum class Risk { kNonFinite, kOverflow, kNearOverflow, kUnderflow, kOk };
const char* RiskName(Risk r);  // "non-finite", "overflow", "near-overflow", "underflow", "ok"
// kNonFinite: inf/NaN seen; kOverflow: values a Cast turned into inf; kNearOverflow: max |x|
// within 2^4 of the dtype's largest finite value; kUnderflow: >= 1% of the non-zero values
// flushed to zero or subnormal. fp32 values are kOk unless non-finite.
Risk RiskOf(const ValueStats& v);

// "step 12 skipped: 'h' from node 'fc1' (MatMul, fp16, forward) holds 812 inf of 4096 ...;
// inputs: 'x' fp16 max|x| 3.1e+02, 'fc1.weight' fp32 max|x| 1.2".
std::string DescribeNonFinite(const NonFiniteReport& r);
// The table printed at the end of a run: the low-precision values and any non-finite one,
// riskiest first (at most `max_rows`).
void PrintPrecisionSummary(const PrecisionStatistics& s, std::FILE* out, size_t max_rows = 25);

// The statistics as JSON (format "mixtrain-precision-stats", version 1; docs/precision-debugger.md).
std::string PrecisionStatsToJson(const PrecisionStatistics& s, const std::string& model, const std::string& low_dtype);
// Reads that file back; an error names the file and what is wrong with it.
struct PrecisionStatsFile {
  std::string model, low_dtype;
  PrecisionStatistics stats;
};
absl::StatusOr<PrecisionStatsFile> ReadPrecisionStats(const std::string& path);

// Each node's worst measured risk and why, "<risk>: <reason>" (TransformOptions::node_risk), for
// `mixtrain dump --stats`; nodes whose values are all ok are left out.
std::map<std::string, std::string> NodeRisks(const PrecisionStatsFile& f);

// A PrecisionPolicy textproto that keeps in fp32 the forward nodes whose values (or whose
// gradients) overflowed or came near it, one `fp32_nodes` line per node with the reason as a
// comment; an op type with three or more such nodes moves to `deny` instead. Empty policy (a
// comment saying nothing needs to move) when every value is safe.
// `all_fp32`, when given, is set when the policy moves every node that computed in the low type to
// fp32: AMP is then off, which the policy's text says too.
std::string SuggestPolicy(const PrecisionStatsFile& f, bool* all_fp32 = nullptr);

}  // namespace mixtrain::cli
