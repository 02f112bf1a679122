#pragma once
/// kv::slots: fixed recurrent-state slots (Mamba2 / Gated DeltaNet state) for hybrid families.
#include <tf/error.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace tf::kv {

/// A fixed set of state slots, free or held; promises are counted like pages. A slot held by a
/// kept prompt state is held but not promised, so it still counts as room.
class slots {
 public:
  explicit slots(std::int64_t total) : held_(static_cast<std::size_t>(total < 0 ? 0 : total)) {
    if (total < 0) throw error("tf::kv::slots: negative slot count {}", total);
    total_ = total;
    for (auto s = total; s-- > 0;) free_.push_back(static_cast<std::int32_t>(s));
  }

  std::int64_t total() const { return total_; }
  std::int64_t free_count() const { return static_cast<std::int64_t>(free_.size()); }
  std::int64_t held_count() const { return total_ - free_count(); }
  std::int64_t promised() const { return promised_; }

  /// Would `n` more promised slots fit in the set alone?
  bool fits(std::int64_t n) const { return n >= 0 && n <= total_ - promised_; }

  /// Counts `n` promised slots (the caller checked the room).
  void promise(std::int64_t n) {
    if (n < 0 || promised_ + n > total_)
      throw error("tf::kv::slots::promise: {} more slots with {} of {} promised", n, promised_,
                  total_);
    promised_ += n;
  }
  /// Returns `n` promised slots.
  void unpromise(std::int64_t n) {
    if (n < 0 || n > promised_)
      throw error("tf::kv::slots::unpromise: {} slots but only {} promised", n, promised_);
    promised_ -= n;
  }

  /// Takes a free slot, if any.
  std::optional<std::int32_t> take() {
    if (free_.empty()) return std::nullopt;
    auto s = free_.back();
    free_.pop_back();
    held_[static_cast<std::size_t>(s)] = true;
    return s;
  }

  /// Returns a held slot to the free set.
  void give_back(std::int32_t s) {
    if (s < 0 || s >= total_ || !held_[static_cast<std::size_t>(s)])
      throw error("tf::kv::slots::give_back: slot {} is not held (of {})", s, total_);
    held_[static_cast<std::size_t>(s)] = false;
    free_.push_back(s);
  }

  bool is_held(std::int32_t s) const {
    return s >= 0 && s < total_ && held_[static_cast<std::size_t>(s)];
  }

 private:
  std::int64_t total_ = 0;
  std::int64_t promised_ = 0;
  std::vector<std::int32_t> free_;
  std::vector<bool> held_;
};

}  // namespace tf::kv
