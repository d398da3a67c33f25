// Einsum: equation parsing (see the header) and the shape rule.
#include "graph/ops/einsum.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "absl/strings/str_cat.h"
#include "graph/shape_inference.h"

namespace mixtrain {
namespace einsum {
namespace {

// The labels of one term; `ellipsis_rank` dims stand in for "...".
absl::StatusOr<std::vector<int>> Term(const std::string& term, int64_t ellipsis_rank, bool* has_ellipsis) {
  std::vector<int> labels;
  *has_ellipsis = false;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term.compare(i, 3, "...") == 0) {
      if (*has_ellipsis) return absl::InvalidArgumentError("a term has two ellipses");
      *has_ellipsis = true;
      for (int64_t k = ellipsis_rank - 1; k >= 0; --k) labels.push_back(kEllipsisBase + static_cast<int>(k));
      i += 2;
    } else if (std::isalpha(static_cast<unsigned char>(term[i]))) {
      labels.push_back(term[i]);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unexpected character '", term.substr(i, 1), "'"));
    }
  }
  return labels;
}

int64_t Letters(const std::string& term) {
  return std::count_if(term.begin(), term.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
}

}  // namespace

absl::StatusOr<Plan> Parse(const std::string& equation,
                           const std::vector<std::vector<int64_t>>& input_dims) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != input_dims.size())
    return absl::InvalidArgumentError(absl::StrCat("equation has ", terms.size(), " terms for ",
                                                   input_dims.size(), " inputs"));
  Plan p;
  std::map<int, int64_t> size;
  std::map<int, int> count;
  int64_t ellipsis_rank = 0;
  for (size_t t = 0; t < terms.size(); ++t) {
    const int64_t rank = static_cast<int64_t>(input_dims[t].size());
    bool ell = false;
    const int64_t er = rank - Letters(terms[t]);
    MT_ASSIGN_OR_RETURN(std::vector<int> labels, Term(terms[t], std::max<int64_t>(er, 0), &ell));
    if (static_cast<int64_t>(labels.size()) != rank || (!ell && er != 0))
      return absl::InvalidArgumentError(absl::StrCat("term '", terms[t], "' does not match rank ", rank));
    if (ell) ellipsis_rank = std::max(ellipsis_rank, er);
    for (int64_t d = 0; d < rank; ++d) {
      const int l = labels[d];
      const int64_t n = input_dims[t][d];
      auto it = size.find(l);
      if (it == size.end() || it->second == 1) {
        size[l] = n;
      } else if (n != it->second && !(l >= kEllipsisBase && n == 1)) {
        return absl::InvalidArgumentError(absl::StrCat("label '", std::string(1, static_cast<char>(l)),
                                                       "' has sizes ", it->second, " and ", n));
      }
      ++count[l];
    }
    p.inputs.push_back(std::move(labels));
  }
  if (arrow != std::string::npos) {
    bool ell = false;
    MT_ASSIGN_OR_RETURN(p.output, Term(eq.substr(arrow + 2), ellipsis_rank, &ell));
  } else {
    for (int64_t k = ellipsis_rank - 1; k >= 0; --k) p.output.push_back(kEllipsisBase + static_cast<int>(k));
    for (const auto& [l, n] : count)
      if (l < kEllipsisBase && n == 1) p.output.push_back(l);
  }
  for (int l : p.output) {
    if (!size.contains(l)) return absl::InvalidArgumentError("an output label is not in any input");
    p.labels.push_back(l);
  }
  for (const auto& [l, n] : size)
    if (std::find(p.output.begin(), p.output.end(), l) == p.output.end()) p.labels.push_back(l);
  for (int l : p.labels) p.sizes.push_back(size[l]);
  return p;
}

std::vector<int64_t> OutputDims(const Plan& p) {
  return std::vector<int64_t>(p.sizes.begin(), p.sizes.begin() + p.output.size());
}

}  // namespace einsum

namespace {

absl::Status InferEinsum(InferContext& ctx) {
  if (ctx.num_inputs() == 0 || !ctx.input(0).present) return ctx.Error("needs at least one input");
  ctx.output(0).dtype = ctx.input(0).dtype;
  std::vector<std::vector<int64_t>> dims;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    const Shape& s = ctx.input(i).shape;
    if (!s.fully_known()) return absl::OkStatus();  // planned once the sizes are known
    dims.push_back(s.sizes());
  }
  auto plan = einsum::Parse(ctx.node().attr_string("equation", ""), dims);
  if (!plan.ok()) return ctx.Error(plan.status().message());
  ctx.output(0).shape = Shape::Of(einsum::OutputDims(*plan));
  return absl::OkStatus();
}

}  // namespace

MT_REGISTER_OP_SCHEMAS(einsum, {{"Einsum", "", InferEinsum}});

}  // namespace mixtrain
