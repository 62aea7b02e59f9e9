#include "core/thread_pool.h"

#include <algorithm>

namespace ms {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i + 1 < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
  if (n <= 0) return;
  int64_t chunks = std::min<int64_t>(size() * 4, (n + min_chunk - 1) / min_chunk);
  if (chunks <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  int64_t chunk = (n + chunks - 1) / chunks;
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = chunk;
  next_ = 0;
  active_ = 0;
  ++generation_;
  cv_work_.notify_all();
  while (next_ < job_n_) {
    int64_t b = next_;
    next_ += job_chunk_;
    ++active_;
    lock.unlock();
    fn(b, std::min(b + chunk, n));
    lock.lock();
    --active_;
  }
  cv_done_.wait(lock, [&] { return active_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_work_.wait(lock, [&] { return stop_ || (job_ && generation_ != seen && next_ < job_n_); });
    if (stop_) return;
    seen = generation_;
    while (job_ && next_ < job_n_) {
      int64_t b = next_;
      next_ += job_chunk_;
      ++active_;
      const auto* fn = job_;
      int64_t e = std::min(b + job_chunk_, job_n_);
      lock.unlock();
      (*fn)(b, e);
      lock.lock();
      if (--active_ == 0 && next_ >= job_n_) cv_done_.notify_all();
    }
  }
}

}  // namespace ms
