// Fuzz target: the input as an IDX file, plain or gzip (zlib's gzread takes both), through
// ReadIdx and the image / label readers `mixtrain train --dataset=fashion-mnist` uses.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "runtime/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mixtrain;
  static const std::string path = fuzz::ScratchPath("input.idx");
  fuzz::WriteFileOrDie(path, std::string_view(reinterpret_cast<const char*>(data), size));
  absl::StatusOr<Tensor> t = ReadIdx(path);
  absl::StatusOr<Tensor> images = ReadIdxImages(path);
  if (images.ok()) {
    MT_CHECK(images->dims().size() == 3) << "ReadIdxImages returned rank " << images->dims().size();
    MT_CHECK(t.ok() && t->Identical(*images)) << "ReadIdxImages accepted what ReadIdx read otherwise";
    (void)ImagesToFloat(*images);
  }
  absl::StatusOr<Tensor> labels = ReadIdxLabels(path);
  if (labels.ok()) {
    MT_CHECK(labels->dims().size() == 1) << "ReadIdxLabels returned rank " << labels->dims().size();
    MT_CHECK(t.ok() && t->Identical(*labels)) << "ReadIdxLabels accepted what ReadIdx read otherwise";
    (void)LabelsToInt64(*labels);
  }
  return 0;
}
