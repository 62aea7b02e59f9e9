#include "server/worker_pool.h"

namespace ms::server {

WorkerPool::WorkerPool(int max_threads) : max_threads_(max_threads > 0 ? max_threads : 1) {}

WorkerPool::~WorkerPool() { shutdown(); }

bool WorkerPool::try_run(std::function<void()> fn) {
  std::lock_guard<std::mutex> l(mu_);
  if (stop_) return false;
  if (idle_ > static_cast<int>(tasks_.size())) {
    tasks_.push_back(std::move(fn));
    ++busy_;
    cv_.notify_one();
    return true;
  }
  if (static_cast<int>(threads_.size()) >= max_threads_) return false;
  tasks_.push_back(std::move(fn));
  ++busy_;
  ++idle_;  // the new thread counts as idle until it takes the task
  threads_.emplace_back([this] { loop(); });
  return true;
}

int WorkerPool::busy() const {
  std::lock_guard<std::mutex> l(mu_);
  return busy_;
}

void WorkerPool::loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) break;  // stop_ and nothing left to run
    std::function<void()> fn = std::move(tasks_.front());
    tasks_.pop_front();
    --idle_;
    l.unlock();
    fn();
    fn = nullptr;  // the task's captures die outside the lock
    l.lock();
    --busy_;
    ++idle_;
  }
  --idle_;
}

void WorkerPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : threads) t.join();
}

}  // namespace ms::server
