// `mixtrain suggest-policy STATS.json [--out=POLICY.textproto]`: turns the precision debugger's
// statistics (`mixtrain train --debug-precision-out=STATS.json`) into a PrecisionPolicy textproto
// for `mixtrain train --policy`, with the reason for each line. Built only on the public API.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "mixtrain/mixtrain.h"
#include "mixtrain/status_macros.h"
#include "tools/cli.h"
#include "tools/precision_report.h"

namespace mixtrain {
namespace {

absl::Status RunSuggest(const cli::Args& args) {
  if (args.positional().size() != 1)
    return absl::InvalidArgumentError(absl::StrCat("expects exactly one STATS.json, got ", args.positional().size(),
                                                   " arguments (see --help)"));
  const std::string out = args.str("out");
  if (args.has("out") && out.empty()) return absl::InvalidArgumentError("flag --out needs a file name");
  std::vector<cli::FileArg> outputs;
  if (!out.empty()) outputs.push_back({"--out", out});
  MIXTRAIN_RETURN_IF_ERROR(cli::CheckFiles({{"STATS.json", args.positional()[0]}}, outputs));
  MIXTRAIN_ASSIGN_OR_RETURN(cli::PrecisionStatsFile f, cli::ReadPrecisionStats(args.positional()[0]));
  bool all_fp32 = false;
  const std::string policy = cli::SuggestPolicy(f, &all_fp32);
  if (all_fp32)
    std::fprintf(stderr, "mixtrain suggest-policy: this policy moves every matrix product and convolution that computed in %s to fp32: AMP is "
                         "then off (see the NOTE in the policy)\n", f.low_dtype.c_str());
  if (out.empty()) {
    std::fputs(policy.c_str(), stdout);
    return absl::OkStatus();
  }
  return cli::AtomicOutputFile::Write("--out", out, policy);
}

MT_REGISTER_COMMAND(
    suggest_policy,
    cli::Command{
        .name = "suggest-policy",
        .usage = "mixtrain suggest-policy STATS.json [--out=POLICY.textproto]",
        .summary = "turn precision statistics (train --debug-precision-out) into a PrecisionPolicy that moves the ops or nodes that overflowed to fp32",
        .flags = {{"out", "", "write the policy here (default: standard output)"}},
        .run = [](const cli::Args& args) {
          absl::Status s = RunSuggest(args);
          return s.ok() ? 0 : cli::Fail("suggest-policy", s);
        }});

}  // namespace
}  // namespace mixtrain
