// mixtrain public API: TensorBoard event files. `mixtrain train --log-dir=DIR` writes its scalars
// (loss, evaluation metrics, learning rate, loss scale, step time) through this writer; a service
// can log its own the same way. TensorBoard reads the directory (`tensorboard --logdir DIR`).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mixtrain {
inline namespace v1 {

// One event file, appended to. The format is TensorFlow's record framing (a little-endian uint64
// length, its masked CRC-32C, the serialized Event, its masked CRC-32C); each event is written
// and flushed to the operating system at once, so a killed process leaves every event written
// before it readable (a torn last record is what TensorBoard's reader skips). Calls on one writer
// are serialized by an internal lock; any thread may call it.
class SummaryWriter {
 public:
  // Creates `log_dir` (and its parents) when missing, then a new file in it named as TensorFlow
  // names them (events.out.tfevents.<unix seconds>.<host>.<pid>.<n>; never an existing file),
  // starting with the file-version event. Errors name the directory.
  static absl::StatusOr<std::unique_ptr<SummaryWriter>> Create(const std::string& log_dir);
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  // Scalars of one step, as one event (the tag is the curve's name: "train/loss", "eval/top1").
  // Non-finite values are written as they are (TensorBoard leaves them out of the curve). An
  // empty or repeated tag, or a write error, is an error naming the tag or the file.
  absl::Status AddScalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  absl::Status AddScalar(std::string_view tag, int64_t step, double value) {
    return AddScalars(step, {{std::string(tag), value}});
  }

  const std::string& path() const;  // the event file

  struct Impl;

 private:
  explicit SummaryWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace v1
}  // namespace mixtrain
