// See onnx_annotations.h.
#include "graph/onnx_annotations.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace mixtrain {

void SplitNodeDocString(const std::string& doc, std::string* text,
                        std::map<std::string, std::string>* annotations) {
  std::vector<std::string> kept;
  for (absl::string_view line : absl::StrSplit(doc, '\n')) {
    size_t eq = line.find('=');
    if (absl::StartsWith(line, kAnnotationPrefix) && eq != absl::string_view::npos) {
      absl::string_view key = line.substr(sizeof(kAnnotationPrefix) - 1,
                                          eq - (sizeof(kAnnotationPrefix) - 1));
      (*annotations)[std::string(key)] = std::string(line.substr(eq + 1));
    } else {
      kept.emplace_back(line);
    }
  }
  *text = absl::StrJoin(kept, "\n");
}

std::string JoinNodeDocString(const std::string& text,
                              const std::map<std::string, std::string>& annotations) {
  std::string out = text;
  for (const auto& [k, v] : annotations) {
    if (!out.empty()) out += '\n';
    out += kAnnotationPrefix;
    out += k;
    out += '=';
    out += v;
  }
  return out;
}

}  // namespace mixtrain
