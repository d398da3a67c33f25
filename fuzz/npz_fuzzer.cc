// Fuzz target: the input as one .npy (ParseNpy, then SerializeNpy -> ParseNpy must give the same
// tensor back) and as an .npz archive (ReadNpz through libzip, from a scratch file; what
// `mixtrain run --input` and `train --data` read).
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "runtime/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mixtrain;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Tensor> t = ParseNpy(bytes, "fuzz.npy");
  if (t.ok()) {
    absl::StatusOr<std::string> again = SerializeNpy(*t);
    MT_CHECK(again.ok()) << "a parsed .npy does not serialize: " << again.status();
    absl::StatusOr<Tensor> back = ParseNpy(*again, "reserialized.npy");
    MT_CHECK(back.ok()) << "a serialized .npy does not parse: " << back.status();
    MT_CHECK(back->Identical(*t)) << ".npy round trip changed the tensor";
  }
  static const std::string path = fuzz::ScratchPath("input.npz");
  fuzz::WriteFileOrDie(path, bytes);
  absl::StatusOr<std::map<std::string, Tensor>> npz = ReadNpz(path);
  if (!npz.ok()) {
    MT_CHECK(!npz.status().message().empty()) << "an .npz error without a message";
  }
  return 0;
}
