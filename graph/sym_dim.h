// Symbolic dims as monomials: a dim of size >= 1 is a number times a product of named symbols
// ("N", "4*N", "s0*s1", the spelling torch's exporters use too). Shape inference multiplies and
// divides them (Reshape's -1, Flatten) and fold_views factors one shape into another with them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "graph/graph.h"

namespace mixtrain::sym {

// A dim as coef times a product of named symbols (sorted; a name may repeat).
struct Mono {
  int64_t coef = 1;
  std::vector<std::string> atoms;
  bool operator==(const Mono& o) const { return coef == o.coef && atoms == o.atoms; }
  bool one() const { return coef == 1 && atoms.empty(); }
  bool known() const { return atoms.empty(); }
};

// A dim of size >= 1: a number, or a symbol spelled as '*'-separated numbers and names ("N",
// "4*N", "s0*s1"). Anything else (unknown dims, sums, zero) is nullopt.
inline std::optional<Mono> MonoOf(const Dim& d) {
  if (d.known()) return d.value >= 1 ? std::optional<Mono>(Mono{d.value, {}}) : std::nullopt;
  if (d.symbol.empty()) return std::nullopt;
  Mono m;
  for (absl::string_view tok : absl::StrSplit(d.symbol, '*')) {
    tok = absl::StripAsciiWhitespace(tok);
    if (tok.empty()) return std::nullopt;
    if (absl::ascii_isdigit(static_cast<unsigned char>(tok[0]))) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(tok, &v) || v < 1 || __builtin_mul_overflow(m.coef, v, &m.coef))
        return std::nullopt;
      continue;
    }
    for (char c : tok)
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') return std::nullopt;
    m.atoms.emplace_back(tok);
  }
  std::sort(m.atoms.begin(), m.atoms.end());
  return m;
}

inline std::optional<Mono> Times(const Mono& a, const Mono& b) {
  Mono m;
  if (__builtin_mul_overflow(a.coef, b.coef, &m.coef)) return std::nullopt;
  m.atoms = a.atoms;
  m.atoms.insert(m.atoms.end(), b.atoms.begin(), b.atoms.end());
  std::sort(m.atoms.begin(), m.atoms.end());
  return m;
}

// a / b when b divides a exactly (b's coefficient divides a's, b's names are among a's).
inline std::optional<Mono> Divide(const Mono& a, const Mono& b) {
  if (a.coef % b.coef != 0) return std::nullopt;
  Mono q;
  q.coef = a.coef / b.coef;
  std::vector<std::string> rest = a.atoms;
  for (const std::string& s : b.atoms) {
    auto it = std::find(rest.begin(), rest.end(), s);
    if (it == rest.end()) return std::nullopt;
    rest.erase(it);
  }
  q.atoms = std::move(rest);
  return q;
}

inline Dim ToDim(const Mono& m) {
  if (m.known()) return Dim(m.coef);
  std::string s = absl::StrJoin(m.atoms, "*");
  return Dim::Symbol(m.coef == 1 ? s : absl::StrCat(m.coef, "*", s));
}

// The product of dims as one dim, or nullopt when one of them is no monomial (unknown).
inline std::optional<Mono> ProductOf(const std::vector<Dim>& dims) {
  Mono p;
  for (const Dim& d : dims) {
    std::optional<Mono> m = MonoOf(d);
    if (!m) return std::nullopt;
    std::optional<Mono> q = Times(p, *m);
    if (!q) return std::nullopt;
    p = *q;
  }
  return p;
}

}  // namespace mixtrain::sym
