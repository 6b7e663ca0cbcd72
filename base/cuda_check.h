// One macro family for every CUDA-side library call: CUDA_CHECK (runtime), CUBLAS_CHECK
// (cuBLASLt), NCCL_CHECK and CUPTI_CHECK. Each turns a failed call into an absl::Status that
// names the statement, file:line, the current device and, where a rank was set on this thread
// (SetCudaCheckRank), that rank; the enclosing function returns it. Library code never aborts.
//
// NCCL_CHECK and CUPTI_CHECK only need the library's result type and its error-string function
// to be declared before use (include nccl.h / cupti.h first), so this header pulls in neither.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace fsdpd {

// The rank reported in error messages from this thread; -1 (the default) means unknown.
inline int& CudaCheckRankSlot() {
  thread_local int rank = -1;
  return rank;
}
inline void SetCudaCheckRank(int rank) { CudaCheckRankSlot() = rank; }

// "cuda:3, rank 1" where known; asking for the device never fails the report.
inline std::string CudaErrorLocation(const char* file, int line) {
  int device = -1;
  const bool have_device = cudaGetDevice(&device) == cudaSuccess;
  std::string where = absl::StrCat(file, ":", line, " (device ");
  absl::StrAppend(&where, have_device ? absl::StrCat("cuda:", device) : std::string("unknown"));
  if (CudaCheckRankSlot() >= 0) absl::StrAppend(&where, ", rank ", CudaCheckRankSlot());
  absl::StrAppend(&where, ")");
  return where;
}

// Out-of-memory keeps its own code so that callers can tell it from a broken device.
inline absl::Status CudaErrorStatus(cudaError_t error, const char* statement, const char* file,
                                    int line) {
  const std::string message =
      absl::StrCat(statement, " failed: ", cudaGetErrorName(error), " (", cudaGetErrorString(error),
                   ") at ", CudaErrorLocation(file, line));
  if (error == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

template <typename Result>
absl::Status LibraryErrorStatus(const char* library, Result result, const char* name,
                                const char* statement, const char* file, int line) {
  return absl::InternalError(absl::StrCat(statement, " failed: ", library, " error ",
                                          static_cast<int>(result), " (", name, ") at ",
                                          CudaErrorLocation(file, line)));
}

}  // namespace fsdpd

#define CUDA_CHECK(statement)                                                             \
  do {                                                                                    \
    const cudaError_t cuda_check_error_ = (statement);                                    \
    if (cuda_check_error_ != cudaSuccess) {                                               \
      return ::fsdpd::CudaErrorStatus(cuda_check_error_, #statement, __FILE__, __LINE__); \
    }                                                                                     \
  } while (false)

// After a kernel launch (kernel_name a string literal): reports a bad configuration (grid,
// shared memory) at once; faults inside the kernel surface at the next synchronising call.
#define CUDA_CHECK_LAUNCH(kernel_name)                                                        \
  do {                                                                                        \
    const cudaError_t cuda_launch_error_ = cudaGetLastError();                                \
    if (cuda_launch_error_ != cudaSuccess) {                                                  \
      return ::fsdpd::CudaErrorStatus(cuda_launch_error_, "launch of " kernel_name, __FILE__, \
                                      __LINE__);                                              \
    }                                                                                         \
  } while (false)

#define CUBLAS_CHECK(statement)                                                                   \
  do {                                                                                            \
    const cublasStatus_t cublas_check_status_ = (statement);                                      \
    if (cublas_check_status_ != CUBLAS_STATUS_SUCCESS) {                                          \
      return ::fsdpd::LibraryErrorStatus("cuBLAS", cublas_check_status_,                          \
                                         cublasLtGetStatusName(cublas_check_status_), #statement, \
                                         __FILE__, __LINE__);                                     \
    }                                                                                             \
  } while (false)

#define NCCL_CHECK(statement)                                                                \
  do {                                                                                       \
    const ncclResult_t nccl_check_result_ = (statement);                                     \
    if (nccl_check_result_ != ncclSuccess) {                                                 \
      return ::fsdpd::LibraryErrorStatus("NCCL", nccl_check_result_,                         \
                                         ncclGetErrorString(nccl_check_result_), #statement, \
                                         __FILE__, __LINE__);                                \
    }                                                                                        \
  } while (false)

#define CUPTI_CHECK(statement)                                                            \
  do {                                                                                    \
    const CUptiResult cupti_check_result_ = (statement);                                  \
    if (cupti_check_result_ != CUPTI_SUCCESS) {                                           \
      const char* cupti_check_name_ = "unknown";                                          \
      cuptiGetResultString(cupti_check_result_, &cupti_check_name_);                      \
      return ::fsdpd::LibraryErrorStatus("CUPTI", cupti_check_result_, cupti_check_name_, \
                                         #statement, __FILE__, __LINE__);                 \
    }                                                                                     \
  } while (false)
