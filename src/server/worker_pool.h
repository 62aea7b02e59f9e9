// The threads that run the HTTP handlers which may block (generation, which
// waits on its request channel; tokenization): at most `max_threads` run at
// once, started as needed and kept for reuse. A full pool says no at once
// (the server answers 503) instead of queueing requests behind one another.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ms::server {

class WorkerPool {
 public:
  explicit WorkerPool(int max_threads);
  ~WorkerPool();  // shutdown()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs fn on a free thread; false (fn dropped) when all are busy or the
  // pool is shut down.
  bool try_run(std::function<void()> fn);
  // Tasks running now.
  int busy() const;
  // Lets running tasks finish, then joins every thread; try_run fails after.
  void shutdown();

 private:
  void loop();

  const int max_threads_;
  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // handed to idle threads, never more than idle_
  std::vector<std::thread> threads_;
  int idle_ = 0;
  int busy_ = 0;
  bool stop_ = false;
};

}  // namespace ms::server
