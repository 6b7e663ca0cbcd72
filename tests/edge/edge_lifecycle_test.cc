// Backends created and destroyed many times in one process: nothing may be left behind.
// NVIDIA's driver once refused vkCreateInstance (VK_ERROR_INCOMPATIBLE_DRIVER) after some thirty
// backends had come and gone in one bench process (bench/RESULTS.md). A backend that leaked its
// instance, device, memory or a file descriptor would leave a trace here per backend: after a
// warm-up (the loader, the driver's compiler and its caches are set up once per process), the
// descriptors open and the resident memory must stay flat over the rest.
//
// FSDPD_EDGE_LIFECYCLE_BACKENDS overrides the count, and FSDPD_EDGE_LIFECYCLE_VALIDATION=0
// turns the validation layer off: the same binary runs on NVIDIA's driver, where Debian 12's
// layer (1.3.239) predates VK_NV_cooperative_matrix2 and reports the backend's use of it as an
// error (bench/RESULTS.md).
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "edge/vulkan_backend.h"
#include "gtest/gtest.h"

namespace fsdpd::edge {
namespace {

int OpenDescriptors() {
  int count = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count - 1;  // the directory's own descriptor
}

int64_t ResidentBytes() {
  long pages = 0, resident = 0;
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return -1;
  const int read = std::fscanf(statm, "%ld %ld", &pages, &resident);
  std::fclose(statm);
  return read == 2 ? int64_t{resident} * sysconf(_SC_PAGESIZE) : -1;
}

int Backends() {
  const char* value = std::getenv("FSDPD_EDGE_LIFECYCLE_BACKENDS");
  return value != nullptr ? std::atoi(value) : 200;
}

bool Validation() {
  const char* value = std::getenv("FSDPD_EDGE_LIFECYCLE_VALIDATION");
  return value == nullptr || std::string(value) != "0";
}

// One backend's life: created with validation (unless turned off), a weight and activations
// placed, a Linear run and read back (so pipelines, memory, descriptor sets and a submit all
// happened), then destroyed. `footprint`: the resident memory it added while it lived.
void OneBackend(int index, int64_t* footprint = nullptr) {
  const int64_t before = ResidentBytes();
  VulkanOptions options;
  options.validation = Validation();
  absl::StatusOr<std::unique_ptr<VulkanBackend>> backend = CreateVulkanBackend(options);
  ASSERT_TRUE(backend.ok()) << "backend " << index << ": " << backend.status();
  constexpr int64_t kRows = 4, kIn = 64, kOut = 32;
  std::vector<float> x(kRows * kIn, 0.5f), w(kOut * kIn, 0.25f), out(kRows * kOut, -1.0f);
  auto weight = (*backend)->Weight(w.data(), w.size());
  auto input = (*backend)->Floats(x.size());
  auto output = (*backend)->Floats(out.size());
  ASSERT_TRUE(weight.ok() && input.ok() && output.ok()) << "backend " << index;
  ASSERT_TRUE((*backend)->WriteFloats(**input, x.data(), x.size()).ok());
  ASSERT_TRUE((*backend)->Linear(**input, **weight, nullptr, kRows, kIn, kOut, **output).ok());
  ASSERT_TRUE((*backend)->ReadFloats(**output, out.data(), out.size()).ok());
  // 64 products of 0.5 × 0.25: 8, exact in fp16 and fp32.
  for (float value : out) ASSERT_EQ(value, 8.0f) << "backend " << index;
  EXPECT_EQ((*backend)->validation_errors(), 0) << (*backend)->last_validation_error();
  if (footprint != nullptr) *footprint = ResidentBytes() - before;
}

TEST(EdgeLifecycleTest, ManyBackendsLeaveNoDescriptorsOrMemoryBehind) {
  const int backends = Backends();
  constexpr int kWarmUp = 10;
  ASSERT_GT(backends, 2 * kWarmUp) << "FSDPD_EDGE_LIFECYCLE_BACKENDS must exceed " << 2 * kWarmUp;
  int64_t first = 0, footprint = 0;
  ASSERT_NO_FATAL_FAILURE(OneBackend(0, &first));
  for (int i = 1; i < kWarmUp; ++i) {
    ASSERT_NO_FATAL_FAILURE(OneBackend(i, &footprint));
  }
  std::printf("a live backend: %+.1f MiB resident the first time, %+.1f MiB once warm\n",
              first / 1048576.0, footprint / 1048576.0);
  const int descriptors = OpenDescriptors();
  const int64_t resident = ResidentBytes();
  ASSERT_GT(descriptors, 0);
  ASSERT_GT(resident, 0);
  for (int i = kWarmUp; i < backends; ++i) {
    ASSERT_NO_FATAL_FAILURE(OneBackend(i));
    ASSERT_EQ(OpenDescriptors(), descriptors) << "after backend " << i;
  }
  const int64_t growth = ResidentBytes() - resident;
  std::printf(
      "%d backends: %d descriptors throughout, resident memory %+.1f MiB after the first %d\n",
      backends, descriptors, growth / 1048576.0, kWarmUp);
  // The bound: 64 KiB a backend. A warm backend's instance, device, pipelines and buffers took
  // 13 MiB on lavapipe with validation (1 MiB without), 5 to 84 MiB on NVIDIA's driver, and a
  // leaked instance grew lavapipe's process by 2.5 MiB a backend: a leak of any of them passes
  // the bound many times over, while malloc's own slack after the warm-up stays below (0.3 MiB
  // over 190 backends on lavapipe, 0.0 MiB on an H100).
  constexpr int64_t kBound = 64 * 1024;
  ASSERT_GT(footprint, 8 * kBound) << "a live backend is too small here for the bound to tell";
  EXPECT_LT(growth, kBound * (backends - kWarmUp));
}

}  // namespace
}  // namespace fsdpd::edge
