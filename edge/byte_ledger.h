// The bytes a backend's live buffers hold, for Backend::CheckRoom: each buffer keeps the Charge
// it was given, which returns its bytes to the ledger when the buffer goes (even after the
// backend that made it). Internal to edge/.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

namespace fsdpd::edge {

class ByteLedger {
 public:
  class Charge {
   public:
    Charge() = default;
    Charge(Charge&& other) noexcept
        : held_(std::move(other.held_)), bytes_(std::exchange(other.bytes_, 0)) {}
    Charge& operator=(Charge&& other) noexcept {
      Release();
      held_ = std::move(other.held_);
      bytes_ = std::exchange(other.bytes_, 0);
      return *this;
    }
    ~Charge() { Release(); }

   private:
    friend class ByteLedger;
    Charge(std::shared_ptr<std::atomic<int64_t>> held, int64_t bytes)
        : held_(std::move(held)), bytes_(bytes) {
      *held_ += bytes_;
    }
    void Release() {
      if (held_ != nullptr) *held_ -= bytes_;
      held_.reset();
      bytes_ = 0;
    }
    std::shared_ptr<std::atomic<int64_t>> held_;
    int64_t bytes_ = 0;
  };

  int64_t held() const { return held_->load(); }
  Charge Take(int64_t bytes) { return Charge(held_, bytes); }

 private:
  std::shared_ptr<std::atomic<int64_t>> held_ = std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace fsdpd::edge
