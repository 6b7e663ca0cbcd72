// The CUDA backend's memory, streams and events: the caching allocator reuses blocks and
// reports current and peak bytes, a failed allocation is an error with the figures, and events
// order work across the compute and communication streams.
#include "worker/backend/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "worker/backend/cuda_allocator.h"

namespace fsdpd {
namespace {

bool HaveDevice() { return CudaBackend::DeviceCount() > 0; }

TEST(CudaAllocatorTest, FreedBlocksAreReusedAndCounted) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  CudaAllocator allocator(CudaAllocatorConfig{});
  absl::StatusOr<void*> first = allocator.Allocate(3 << 20);
  ASSERT_TRUE(first.ok()) << first.status();
  const int64_t block = CudaAllocator::RoundedSize(3 << 20);
  EXPECT_GE(block, 3 << 20);
  EXPECT_EQ(allocator.stats().current_bytes, block);
  allocator.Free(*first);
  EXPECT_EQ(allocator.stats().current_bytes, 0);
  EXPECT_EQ(allocator.stats().cached_bytes, block);
  absl::StatusOr<void*> second = allocator.Allocate(3 << 20);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, *first) << "a cached block of the same size class is handed out again";
  EXPECT_EQ(allocator.stats().cached_bytes, 0);

  absl::StatusOr<void*> small = allocator.Allocate(100);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*small) % 256, 0u);
  EXPECT_EQ(allocator.stats().peak_bytes, block + CudaAllocator::RoundedSize(100));
  allocator.Free(*second);
  allocator.Free(*small);
  EXPECT_EQ(allocator.stats().current_bytes, 0);
  EXPECT_EQ(allocator.stats().peak_bytes, block + CudaAllocator::RoundedSize(100));
  allocator.ResetPeak();
  EXPECT_EQ(allocator.stats().peak_bytes, 0);
  allocator.ReleaseCached();
  EXPECT_EQ(allocator.stats().reserved_bytes, 0);
}

TEST(CudaAllocatorTest, AnImpossibleAllocationIsAnErrorWithTheFigures) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  CudaAllocator allocator(CudaAllocatorConfig{});
  absl::StatusOr<void*> held = allocator.Allocate(1 << 20);
  ASSERT_TRUE(held.ok());
  // A petabyte: more than any device has, also after the cache is emptied.
  absl::StatusOr<void*> huge = allocator.Allocate(int64_t{1} << 50);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  const std::string message(huge.status().message());
  EXPECT_NE(message.find(std::to_string(int64_t{1} << 50)), std::string::npos) << message;
  EXPECT_NE(message.find("in use"), std::string::npos) << message;
  EXPECT_NE(message.find("peak"), std::string::npos) << message;
  // The allocator still works afterwards.
  absl::StatusOr<void*> after = allocator.Allocate(1 << 20);
  EXPECT_TRUE(after.ok()) << after.status();
  allocator.Free(*held);
  if (after.ok()) allocator.Free(*after);
  EXPECT_EQ(allocator.Allocate(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaAllocatorTest, TheConfiguredLimitIsEnforced) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  CudaAllocator allocator(CudaAllocatorConfig{0, int64_t{8} << 20});
  absl::StatusOr<void*> fits = allocator.Allocate(6 << 20);
  ASSERT_TRUE(fits.ok());
  absl::StatusOr<void*> over = allocator.Allocate(4 << 20);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  allocator.Free(*fits);
}

TEST(CudaBackendTest, BuffersStatsCopiesAndEvents) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  absl::StatusOr<std::unique_ptr<CudaBackend>> created = CudaBackend::Create({});
  ASSERT_TRUE(created.ok()) << created.status();
  CudaBackend& backend = **created;
  EXPECT_EQ(backend.name(), "cuda:0");
  EXPECT_EQ(backend.activation_dtype(), DType::kBF16);
  const int64_t before = backend.memory_stats().current_bytes;
  const int64_t count = 1 << 20;
  absl::StatusOr<std::unique_ptr<Buffer>> buffer = backend.Allocate(count * 4);
  ASSERT_TRUE(buffer.ok());
  EXPECT_GE(backend.memory_stats().current_bytes, before + count * 4);
  EXPECT_GE(backend.memory_stats().reserved_bytes, backend.memory_stats().current_bytes);
  EXPECT_GT(backend.memory_stats().device_total_bytes, 0);

  // Fill on the compute stream, an event, then a copy ordered after it on the comm stream.
  const Tensor values = (*buffer)->View(DType::kF32, {count});
  absl::StatusOr<std::unique_ptr<Buffer>> copy_buffer = backend.Allocate(count * 4);
  ASSERT_TRUE(copy_buffer.ok());
  const Tensor copy = (*copy_buffer)->View(DType::kF32, {count});
  ASSERT_TRUE(backend.ops().Fill(values, 2.5f, backend.compute_stream()).ok());
  absl::StatusOr<std::unique_ptr<Event>> event = backend.CreateEvent();
  ASSERT_TRUE(event.ok());
  ASSERT_TRUE((*event)->Record(backend.compute_stream()).ok());
  ASSERT_TRUE((*event)->WaitOn(backend.comm_stream()).ok());
  ASSERT_TRUE(backend.ops().Cast(values, copy, backend.comm_stream()).ok());
  std::vector<float> host(count);
  ASSERT_TRUE(backend.CopyToHost(copy, host.data(), backend.comm_stream()).ok());
  for (int64_t i = 0; i < count; i += 4093) ASSERT_EQ(host[i], 2.5f) << i;

  std::vector<float> upload(count, -1.0f);
  ASSERT_TRUE(backend.CopyToDevice(upload.data(), values, backend.compute_stream()).ok());
  ASSERT_TRUE(backend.CopyToHost(values, host.data(), backend.compute_stream()).ok());
  EXPECT_EQ(host[count - 1], -1.0f);

  EXPECT_EQ(backend.Allocate(int64_t{1} << 50).status().code(),
            absl::StatusCode::kResourceExhausted);
  buffer->reset();
  copy_buffer->reset();
  EXPECT_EQ(backend.memory_stats().current_bytes, before);
}

// Lower numbers are higher priorities in CUDA.
TEST(CudaBackendTest, StreamPriorityPutsTheChosenStreamAheadOfTheOther) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  auto priority = [](Stream& stream) {
    int value = 0;
    EXPECT_EQ(cudaStreamGetPriority(dynamic_cast<CudaStream&>(stream).get(), &value), cudaSuccess);
    return value;
  };
  absl::StatusOr<std::unique_ptr<CudaBackend>> plain = CudaBackend::Create({});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(priority((*plain)->compute_stream()), priority((*plain)->comm_stream()));
  CudaBackendConfig config;
  config.stream_priority = CudaBackendConfig::StreamPriority::kComputeFirst;
  absl::StatusOr<std::unique_ptr<CudaBackend>> ordered = CudaBackend::Create(config);
  ASSERT_TRUE(ordered.ok()) << ordered.status();
  EXPECT_LT(priority((*ordered)->compute_stream()), priority((*ordered)->comm_stream()));
  config.stream_priority = CudaBackendConfig::StreamPriority::kCommFirst;
  absl::StatusOr<std::unique_ptr<CudaBackend>> comm_first = CudaBackend::Create(config);
  ASSERT_TRUE(comm_first.ok()) << comm_first.status();
  EXPECT_LT(priority((*comm_first)->comm_stream()), priority((*comm_first)->compute_stream()));
}

TEST(CudaBackendTest, AMissingDeviceIsAnError) {
  CudaBackendConfig config;
  config.device = CudaBackend::DeviceCount() + 3;
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create(config);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(backend.status().message().find("does not exist"), std::string::npos);
}

}  // namespace
}  // namespace fsdpd
