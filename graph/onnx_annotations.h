// Node annotations (Node::annotations(), e.g. "precision") travel through ONNX in the node's
// doc_string as "mixtrain:key=value" lines: NodeProto has no metadata field in ONNX 1.12, and a
// doc_string survives every tool that reads and rewrites models.
#pragma once

#include <map>
#include <string>

namespace mixtrain {

inline constexpr char kAnnotationPrefix[] = "mixtrain:";

// Splits a doc_string into its plain text and the annotation lines.
void SplitNodeDocString(const std::string& doc, std::string* text,
                        std::map<std::string, std::string>* annotations);
// The inverse: text, then one "mixtrain:key=value" line per annotation (sorted by key).
std::string JoinNodeDocString(const std::string& text,
                              const std::map<std::string, std::string>& annotations);

}  // namespace mixtrain
