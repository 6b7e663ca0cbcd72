// A few coarse pieces of work at once: the units of a model drawn in a wave, the slices of a
// large shard split, the shader pipelines built at start.
#pragma once

#include <functional>
#include <thread>
#include <vector>

namespace fsdpd {

// Runs body(0) … body(count − 1) at once, body(0) on the calling thread and each other on a
// thread of its own, and returns when all have returned; count ≤ 0 runs nothing. The bodies
// share whatever they capture: each must write only what is its own.
inline void RunOnThreads(int count, const std::function<void(int)>& body) {
  if (count <= 0) return;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(count - 1));
  for (int i = 1; i < count; ++i) threads.emplace_back(body, i);
  body(0);
  for (std::thread& thread : threads) thread.join();
}

}  // namespace fsdpd
