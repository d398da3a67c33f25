// Fuzz target: `mixtrain dump` end to end through the public API it is built on (TransformModel,
// include/mixtrain/transform.h): import a model file, run passes, render text / DOT / ONNX.
//
// Input layout: byte 0 picks the options, byte 1 the passes, then the ONNX model bytes.
//   byte 0: bits 0-1 format (text, dot, onnx to a file, text), bits 2-3 precision preset
//           (amp, fp32, half, amp), bit 4 low type (bf16, fp16), bits 5-7 loss.
//   byte 1: bit 2 "train", bit 3 "eval" (the whole training / eval graph); otherwise bits 0-1
//           are a count N of passes, named by the next N bytes (index into TransformPassNames()).
// tools/fuzz/make_corpus.sh prefixes ONNX seeds with such headers.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "mixtrain/transform.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mixtrain;
  if (size < 2) return 0;
  static const std::vector<std::string> pass_names = TransformPassNames();
  static const char* const kLosses[] = {"cross_entropy", "mse", "l1", "bce_with_logits",
                                        "output:y", "output:", "cross_entropy", "mse"};
  const uint8_t opt = data[0], sel = data[1];
  size_t pos = 2;
  TransformOptions options;
  if (sel & 4) {
    options.passes = {"train"};
  } else if (sel & 8) {
    options.passes = {"eval"};
  } else {
    for (int i = 0; i < (sel & 3) && pos < size; ++i)
      options.passes.push_back(pass_names[data[pos++] % pass_names.size()]);
  }
  const GraphFormat format = (opt & 3) == 1 ? GraphFormat::kDot
                             : (opt & 3) == 2 ? GraphFormat::kOnnx
                                              : GraphFormat::kText;
  options.precision = ((opt >> 2) & 3) == 1 ? "fp32" : ((opt >> 2) & 3) == 2 ? "half" : "amp";
  options.low_type = (opt & 16) ? ElementType::kFloat16 : ElementType::kBFloat16;
  options.loss = kLosses[opt >> 5];
  if (options.loss == "cross_entropy" && (opt & 64)) options.class_axis = -1;

  static const std::string model = fuzz::ScratchPath("model.onnx");
  static const std::string out = fuzz::ScratchPath("out.onnx");
  fuzz::WriteFileOrDie(model, std::string_view(reinterpret_cast<const char*>(data + pos), size - pos));
  absl::StatusOr<TransformedModel> m =
      TransformModel(model, options, format, format == GraphFormat::kOnnx ? out : "");
  if (!m.ok()) {
    MT_CHECK(!m.status().message().empty()) << "a dump error without a message";
    return 0;
  }
  MT_CHECK(format == GraphFormat::kOnnx || !m->graph.empty()) << "dump printed nothing";
  return 0;
}
