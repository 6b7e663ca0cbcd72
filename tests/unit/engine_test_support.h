// Helpers for the engine's tests: temporary directories and a world of ranks on threads of one
// process, connected by Gloo over loopback through a FileKeyValueStore.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/temp_dir.h"
#include "worker/comm/communicator.h"
#include "worker/comm/file_key_value_store.h"

namespace fsdpd::testing {

// Runs body(communicator) on `world_size` threads, one rank each; fails the test if a rank
// cannot connect.
inline void RunRanks(int world_size, const std::function<void(Communicator& communicator)>& body,
                     std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  TempDir store_dir;
  auto store = FileKeyValueStore::Open(store_dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      CommunicatorOptions options;
      options.rank = rank;
      options.world_size = world_size;
      options.timeout = timeout;
      auto communicator = CreateCommunicator(options, store->get());
      ASSERT_TRUE(communicator.ok()) << communicator.status();
      body(**communicator);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

}  // namespace fsdpd::testing
