#include "api/read_ahead.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

namespace mixtrain::api {

ReadAhead::~ReadAhead() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void ReadAhead::Work() {
  // Below the caller's priority: waking the worker must not preempt the thread that trains (on a
  // busy machine that cost the step milliseconds per batch); it has a whole step to finish.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || job_.has_value(); });
    if (stop_) return;
    std::vector<int64_t> indices = std::move(*job_);
    job_.reset();
    busy_ = true;
    lock.unlock();
    absl::StatusOr<TensorMap> batch = gather_(indices);
    lock.lock();
    ready_indices_ = std::move(indices);
    ready_ = std::move(batch);
    busy_ = false;
    cv_.notify_all();
  }
}

absl::StatusOr<TensorMap> ReadAhead::Gather(const std::vector<int64_t>& order, int64_t begin, int64_t end) {
  std::lock_guard<std::mutex> call(call_mu_);
  std::optional<absl::StatusOr<TensorMap>> batch;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !busy_ && !job_.has_value(); });  // the guess in flight, if any, lands
    if (ready_.has_value() && std::equal(order.begin() + begin, order.begin() + end, ready_indices_.begin(),
                                         ready_indices_.end()))
      batch = std::move(ready_);
    ready_.reset();
  }
  if (!batch.has_value()) batch = gather_(std::vector<int64_t>(order.begin() + begin, order.begin() + end));
  const int64_t stride = last_begin_ >= 0 && begin > last_begin_ ? begin - last_begin_ : end - begin;
  last_begin_ = begin;
  if (stride > 0 && end + stride <= static_cast<int64_t>(order.size())) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_.emplace(order.begin() + begin + stride, order.begin() + end + stride);
    }
    if (!worker_.joinable()) worker_ = std::thread([this] { Work(); });
    cv_.notify_all();
  }
  return *std::move(batch);
}

}  // namespace mixtrain::api
