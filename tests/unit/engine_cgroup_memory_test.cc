// The memory cgroup reader (worker/device/cgroup_memory.h) on fake /proc/self/cgroup files and
// cgroup trees, v1 and v2, and the OOM-kill record a restarted worker reads
// (worker/device/oom_evidence.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"
#include "worker/device/cgroup_memory.h"
#include "worker/device/oom_evidence.h"

namespace fsdpd {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

class CgroupMemoryTest : public ::testing::Test {
 protected:
  void Write(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = std::filesystem::path(dir_.path()) / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  CgroupRoots Roots() const { return {dir_.File("proc-self-cgroup"), dir_.File("cgroup")}; }

  testing::TempDir dir_{"cgroup"};
};

TEST_F(CgroupMemoryTest, V2TakesTheTightestLimitUpToTheRootAndTheOomKillCount) {
  Write("proc-self-cgroup", "0::/system.slice/worker.service\n");
  Write("cgroup/system.slice/worker.service/memory.max", "max\n");
  Write("cgroup/system.slice/worker.service/memory.events",
        "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n");
  Write("cgroup/system.slice/memory.max", "2684354560\n");  // 2.5 GiB on the parent binds
  Write("cgroup/memory.max", "max\n");
  const CgroupMemory cgroup = ReadCgroupMemory(Roots());
  EXPECT_EQ(cgroup.version, 2);
  EXPECT_EQ(cgroup.path, "/system.slice/worker.service");
  EXPECT_EQ(cgroup.directory, dir_.File("cgroup/system.slice/worker.service"));
  EXPECT_EQ(cgroup.limit_bytes, 2684354560);
  ASSERT_TRUE(cgroup.oom_kills.has_value());
  EXPECT_EQ(*cgroup.oom_kills, 2);
  // The leaf's own limit, when tighter, wins.
  Write("cgroup/system.slice/worker.service/memory.max", "1073741824\n");
  EXPECT_EQ(ReadCgroupMemory(Roots()).limit_bytes, kGiB);
}

TEST_F(CgroupMemoryTest, V2InsideANamespaceOrWithAPathNotMountedReadsTheMountsRoot) {
  Write("proc-self-cgroup", "0::/\n");
  Write("cgroup/memory.max", "536870912\n");
  Write("cgroup/memory.events", "oom_kill 0\n");
  CgroupMemory cgroup = ReadCgroupMemory(Roots());
  EXPECT_EQ(cgroup.limit_bytes, 512 << 20);
  EXPECT_EQ(cgroup.directory, dir_.File("cgroup"));
  EXPECT_EQ(cgroup.oom_kills, 0);
  Write("proc-self-cgroup", "0::/kubepods/pod1/container\n");  // not under this mount
  cgroup = ReadCgroupMemory(Roots());
  EXPECT_EQ(cgroup.limit_bytes, 512 << 20);
  // A path that climbs out of the mount stays inside it.
  Write("outside/memory.max", "1\n");
  Write("proc-self-cgroup", "0::/../outside\n");
  cgroup = ReadCgroupMemory(Roots());
  EXPECT_EQ(cgroup.directory, dir_.File("cgroup"));
  EXPECT_EQ(cgroup.limit_bytes, 512 << 20);
}

TEST_F(CgroupMemoryTest, V1UsesTheMemoryControllerAndTreatsHugeLimitsAsNone) {
  Write("proc-self-cgroup", "12:cpu,cpuacct:/docker/abc\n11:memory:/docker/abc\n0::/docker/abc\n");
  Write("cgroup/memory/docker/abc/memory.limit_in_bytes", "2147483648\n");
  Write("cgroup/memory/docker/abc/memory.oom_control",
        "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n");
  Write("cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  // A v2 file that must not be read: the memory controller is on v1 (a hybrid host).
  Write("cgroup/docker/abc/memory.max", "1\n");
  CgroupMemory cgroup = ReadCgroupMemory(Roots());
  EXPECT_EQ(cgroup.version, 1);
  EXPECT_EQ(cgroup.limit_bytes, 2 * kGiB);
  EXPECT_EQ(cgroup.oom_kills, 4);
  // No limit anywhere: none.
  Write("cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
  cgroup = ReadCgroupMemory(Roots());
  EXPECT_EQ(cgroup.limit_bytes, 0);
}

TEST_F(CgroupMemoryTest, NothingReadableIsNoCgroupAndUsableMemoryIsTheSmaller) {
  CgroupMemory none = ReadCgroupMemory(Roots());
  EXPECT_EQ(none.version, 0);
  EXPECT_EQ(none.limit_bytes, 0);
  EXPECT_FALSE(none.oom_kills.has_value());
  EXPECT_EQ(UsableHostMemory(24 * kGiB, none), 24 * kGiB);
  CgroupMemory limited;
  limited.limit_bytes = 2 * kGiB;
  EXPECT_EQ(UsableHostMemory(24 * kGiB, limited), 2 * kGiB);
  limited.limit_bytes = 64 * kGiB;  // a limit above the host's RAM does not add any
  EXPECT_EQ(UsableHostMemory(24 * kGiB, limited), 24 * kGiB);
  EXPECT_EQ(UsableHostMemory(0, limited), 64 * kGiB);
}

TEST_F(CgroupMemoryTest, ARestartedWorkerFindsTheAttemptTheOomKillerEnded) {
  CgroupMemory cgroup;
  cgroup.version = 2;
  cgroup.directory = "/sys/fs/cgroup/worker";
  cgroup.oom_kills = 5;
  const std::string file = OomEvidenceFile(dir_.path(), "host a", "cuda:0");
  EXPECT_EQ(file, dir_.path() + "/.fsdpd-worker/host_a-cuda_0.attempt");
  OomEvidence evidence(file, [&] { return cgroup; });
  EXPECT_FALSE(evidence.PreviousKill().has_value());  // no record yet

  evidence.Started({"job-000004", "uid-4", 2, 1});
  EXPECT_FALSE(evidence.PreviousKill().has_value());  // the count has not risen
  cgroup.oom_kills = 6;
  std::optional<OomKillReport> report = evidence.PreviousKill();
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->attempt.job_id, "job-000004");
  EXPECT_EQ(report->attempt.job_uid, "uid-4");
  EXPECT_EQ(report->attempt.attempt, 2);
  EXPECT_EQ(report->attempt.rank, 1);
  EXPECT_EQ(report->cgroup, "/sys/fs/cgroup/worker");
  EXPECT_EQ(report->oom_kills_before, 5);
  EXPECT_EQ(report->oom_kills_after, 6);

  // Another cgroup's count says nothing about this one; nor does a count that was reset.
  cgroup.directory = "/sys/fs/cgroup/other";
  EXPECT_FALSE(evidence.PreviousKill().has_value());
  cgroup.directory = "/sys/fs/cgroup/worker";
  cgroup.oom_kills = 0;
  EXPECT_FALSE(evidence.PreviousKill().has_value());
  // A clean end leaves nothing to report.
  cgroup.oom_kills = 9;
  evidence.Clear();
  EXPECT_FALSE(evidence.PreviousKill().has_value());
  // Without a count to compare, nothing is recorded.
  cgroup.oom_kills.reset();
  evidence.Started({"job-000005", "uid-5", 1, 0});
  EXPECT_FALSE(std::filesystem::exists(file));
}

}  // namespace
}  // namespace fsdpd
