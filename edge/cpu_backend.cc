#include "edge/cpu_backend.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "edge/argmax.h"
#include "edge/byte_ledger.h"
#include "edge/quantize.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/silu.h"

namespace fsdpd::edge {
namespace {

struct HostBuffer : Buffer {
  std::vector<float> floats;
  std::vector<int32_t> ints;
  ByteLedger::Charge charge;  // its bytes, on the backend's ledger
  bool int8 = false;          // int8 weights, held dequantized (Int8Weight)
};

HostBuffer& Host(Buffer& buffer) { return static_cast<HostBuffer&>(buffer); }

double PhysicalMemoryBytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

absl::Status HostRoomError(double bytes, double held, double memory) {
  return absl::ResourceExhaustedError(
      absl::StrCat("cannot allocate ", absl::StrFormat("%.3g", bytes / (1 << 30)),
                   " GiB on the host beside the ", absl::StrFormat("%.3g", held / (1 << 30)),
                   " GiB already held (", absl::StrFormat("%.3g", memory / (1 << 30)),
                   " GiB of memory); use a smaller batch or sequence"));
}

// Whether `bytes` more fit beside what `ledger` holds within `memory`.
absl::Status CheckHostRoom(const ByteLedger& ledger, double memory, double bytes) {
  const double held = static_cast<double>(ledger.held());
  if (memory > 0 && held + bytes > memory) return HostRoomError(bytes, held, memory);
  return absl::OkStatus();
}

// A buffer of `count` floats or ints (`values` from `source` where given), charged to `ledger`.
// What the backend's buffers would hold together past `memory` bytes (a --seq or --batch far too
// large) is an error naming the sizes, not an abort in the allocator or the kernel's
// out-of-memory killer.
template <class T>
absl::StatusOr<std::unique_ptr<Buffer>> NewHostBuffer(ByteLedger& ledger, double memory,
                                                      int64_t count,
                                                      std::vector<T> HostBuffer::*values,
                                                      const T* source = nullptr) {
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("a tensor of ", count, " elements"));
  }
  const double bytes = static_cast<double>(count) * sizeof(T);
  FSDPD_RETURN_IF_ERROR(CheckHostRoom(ledger, memory, bytes));
  auto buffer = std::make_unique<HostBuffer>();
  try {
    if (source != nullptr) {
      (buffer.get()->*values).assign(source, source + count);
    } else {
      (buffer.get()->*values).resize(static_cast<size_t>(count));
    }
  } catch (const std::bad_alloc&) {
    return HostRoomError(bytes, static_cast<double>(ledger.held()), memory);
  }
  buffer->charge = ledger.Take(static_cast<int64_t>(bytes));
  return std::unique_ptr<Buffer>(std::move(buffer));
}

class CpuBackend : public Backend {
 public:
  CpuBackend(int64_t memory_bytes, bool int8_activations)
      : memory_(memory_bytes > 0 ? static_cast<double>(memory_bytes) : PhysicalMemoryBytes()),
        int8_activations_(int8_activations) {}
  std::string Describe() const override { return "cpu (fp32 reference, kernels/cpu)"; }

  absl::Status CheckRoom(double bytes) override { return CheckHostRoom(ledger_, memory_, bytes); }
  absl::StatusOr<std::unique_ptr<Buffer>> Weight(const float* values, int64_t count) override {
    return NewHostBuffer(ledger_, memory_, count, &HostBuffer::floats, values);
  }
  // The reference multiplies by the int8 weights' values as fp32 (q · scale, exact): what the
  // shaders multiply by. They are held dequantized, so they take the host 4 bytes each, as fp32
  // weights do.
  absl::StatusOr<std::unique_ptr<Buffer>> Int8Weight(const Int8Tensor& tensor) override {
    const std::vector<float> values = tensor.Dequantize();
    FSDPD_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buffer,
                           NewHostBuffer(ledger_, memory_, static_cast<int64_t>(values.size()),
                                         &HostBuffer::floats, values.data()));
    Host(*buffer).int8 = true;
    return buffer;
  }
  int64_t Bytes(Buffer& buffer) override {
    return static_cast<int64_t>(Host(buffer).floats.size() * sizeof(float) +
                                Host(buffer).ints.size() * sizeof(int32_t));
  }
  absl::StatusOr<std::unique_ptr<Buffer>> Floats(int64_t count) override {
    return NewHostBuffer(ledger_, memory_, count, &HostBuffer::floats);
  }
  absl::StatusOr<std::unique_ptr<Buffer>> Ints(int64_t count) override {
    return NewHostBuffer(ledger_, memory_, count, &HostBuffer::ints);
  }
  absl::Status WriteInts(Buffer& buffer, const int32_t* values, int64_t count) override {
    std::memcpy(Host(buffer).ints.data(), values, static_cast<size_t>(count) * sizeof(int32_t));
    return absl::OkStatus();
  }
  absl::Status WriteFloats(Buffer& buffer, const float* values, int64_t count) override {
    std::memcpy(Host(buffer).floats.data(), values, static_cast<size_t>(count) * sizeof(float));
    return absl::OkStatus();
  }
  absl::Status ReadFloats(Buffer& buffer, float* values, int64_t count) override {
    std::memcpy(values, Host(buffer).floats.data(), static_cast<size_t>(count) * sizeof(float));
    return absl::OkStatus();
  }
  absl::Status ReadInts(Buffer& buffer, int32_t* values, int64_t count) override {
    const std::vector<int32_t>& ints = Host(buffer).ints;
    if (count < 0 || count > static_cast<int64_t>(ints.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("ReadInts of ", count, " ids from a buffer of ", ints.size()));
    }
    std::memcpy(values, ints.data(), static_cast<size_t>(count) * sizeof(int32_t));
    return absl::OkStatus();
  }
  absl::Status Embedding(Buffer& table, Buffer& tokens, int64_t count, int64_t dim,
                         Buffer& out) override {
    cpu::EmbeddingForward(Host(table).floats.data(), Host(tokens).ints.data(), count, dim,
                          Host(out).floats.data());
    return absl::OkStatus();
  }
  absl::Status RmsNorm(Buffer& x, Buffer& weight, int64_t rows, int64_t dim, double eps,
                       Buffer& out) override {
    rstd_.resize(static_cast<size_t>(rows));
    cpu::RmsNormForward(Host(x).floats.data(), Host(weight).floats.data(), rows, dim, eps,
                        Host(out).floats.data(), rstd_.data());
    return absl::OkStatus();
  }
  absl::Status Linear(Buffer& x, Buffer& weight, Buffer* bias, int64_t rows, int64_t in_features,
                      int64_t out_features, Buffer& out) override {
    const float* inputs = Host(x).floats.data();
    if (int8_activations_ && Host(weight).int8) {
      quantized_x_.assign(inputs, inputs + rows * in_features);
      QuantizeActivationsInPlace(quantized_x_.data(), rows, in_features);
      inputs = quantized_x_.data();
    }
    cpu::LinearForward(inputs, Host(weight).floats.data(),
                       bias != nullptr ? Host(*bias).floats.data() : nullptr, rows, in_features,
                       out_features, Host(out).floats.data());
    return absl::OkStatus();
  }
  absl::Status Attention(Buffer& qkv, int64_t batch, int64_t seq, int64_t heads, int64_t dim,
                         bool causal, Buffer& out) override {
    lse_.resize(static_cast<size_t>(batch * heads * seq));
    cpu::AttentionForward(Host(qkv).floats.data(), {batch, seq, heads, dim}, causal,
                          Host(out).floats.data(), lse_.data());
    return absl::OkStatus();
  }
  absl::Status CausalAttentionAt(Buffer& qkv, int64_t first, int64_t rows, int64_t heads,
                                 int64_t dim, Buffer& out) override {
    cpu::CausalAttentionRows(Host(qkv).floats.data(), heads, dim, first, rows,
                             Host(out).floats.data());
    return absl::OkStatus();
  }
  absl::Status CopyFloats(Buffer& from, int64_t from_offset, Buffer& to, int64_t to_offset,
                          int64_t count) override {
    FSDPD_RETURN_IF_ERROR(CheckCopyRange(static_cast<int64_t>(Host(from).floats.size()),
                                         from_offset, static_cast<int64_t>(Host(to).floats.size()),
                                         to_offset, count));
    if (count == 0) return absl::OkStatus();
    std::memcpy(Host(to).floats.data() + to_offset, Host(from).floats.data() + from_offset,
                static_cast<size_t>(count) * sizeof(float));
    return absl::OkStatus();
  }
  absl::Status Silu(Buffer& x, int64_t count, Buffer& out) override {
    cpu::SiluForward(Host(x).floats.data(), count, Host(out).floats.data());
    return absl::OkStatus();
  }
  absl::Status Add(Buffer& a, Buffer& b, int64_t count, Buffer& out) override {
    cpu::Add(Host(a).floats.data(), Host(b).floats.data(), count, Host(out).floats.data());
    return absl::OkStatus();
  }
  absl::Status TokenNll(Buffer& logits, Buffer& targets, int64_t rows, int64_t vocab,
                        Buffer& nll) override {
    const float* values = Host(logits).floats.data();
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = values + r * vocab;
      double best = row[0];
      for (int64_t v = 1; v < vocab; ++v) best = std::max<double>(best, row[v]);
      double sum = 0.0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - best);
      Host(nll).floats[static_cast<size_t>(r)] = static_cast<float>(
          std::log(sum) + best - row[Host(targets).ints[static_cast<size_t>(r)]]);
    }
    return absl::OkStatus();
  }
  absl::Status Argmax(Buffer& logits, int64_t vocab, Buffer& next, Buffer& history,
                      int64_t index) override {
    FSDPD_RETURN_IF_ERROR(CheckArgmax(vocab, static_cast<int64_t>(Host(logits).floats.size()),
                                      static_cast<int64_t>(Host(next).ints.size()),
                                      static_cast<int64_t>(Host(history).ints.size()), index));
    const int32_t pick = GreedyPick(Host(logits).floats.data(), vocab);
    Host(next).ints[0] = pick;
    Host(history).ints[static_cast<size_t>(index)] = pick;
    return absl::OkStatus();
  }
  absl::Status Finish() override { return absl::OkStatus(); }

 private:
  double memory_;  // what the buffers may hold together
  bool int8_activations_;
  ByteLedger ledger_;
  std::vector<float> quantized_x_;  // Linear's x, quantized where int8_activations_ asks
  std::vector<float> rstd_;         // what the training kernels save for backward; unused here
  std::vector<float> lse_;
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(int64_t memory_bytes, bool int8_activations) {
  return std::make_unique<CpuBackend>(memory_bytes, int8_activations);
}

}  // namespace fsdpd::edge
