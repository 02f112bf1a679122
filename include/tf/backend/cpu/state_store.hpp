#pragma once
/// The CPU backend's recurrent-state store: one slot per running stream (or kept prompt), each
/// holding the f32 state of every recurrent layer.
#include <tf/backend/backend.hpp>
#include <tf/error.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tf::backend::cpu_parts {

class state_store {
 public:
  state_store() = default;
  state_store(std::int32_t slots, state_layout layout)
      : slots_(slots),
        layout_(layout),
        data_(static_cast<std::size_t>(slots) * slot_floats(layout), 0.0f) {
    if (slots < 0 || layout.layers < 0 || layout.floats < 0)
      throw error("tf: a state store of {} slots of {} layers x {} floats", slots, layout.layers,
                  layout.floats);
  }

  std::int32_t slots() const { return slots_; }
  state_layout layout() const { return layout_; }
  std::int64_t slot_bytes() const {
    return static_cast<std::int64_t>(state_bytes_per_slot(layout_));
  }

  /// Slot s's state of recurrent layer `layer` [layout.floats].
  float* at(std::int32_t s, int layer) {
    check(s);
    return data_.data() + static_cast<std::size_t>(s) * slot_floats(layout_) +
           static_cast<std::size_t>(layer) * static_cast<std::size_t>(layout_.floats);
  }

  /// Slot `to` becomes a copy of slot `from` (a kept prefix's state into a new stream's slot).
  void copy(std::int32_t from, std::int32_t to) {
    check(from);
    check(to);
    if (from == to) return;
    auto const n = slot_floats(layout_);
    std::copy_n(data_.data() + static_cast<std::size_t>(from) * n, n,
                data_.data() + static_cast<std::size_t>(to) * n);
  }

 private:
  static std::size_t slot_floats(state_layout l) {
    return static_cast<std::size_t>(l.layers) * static_cast<std::size_t>(l.floats);
  }
  void check(std::int32_t s) const {
    if (s < 0 || s >= slots_) throw error("tf: state slot {} is outside 0..{}", s, slots_ - 1);
  }

  std::int32_t slots_ = 0;
  state_layout layout_;
  std::vector<float> data_;
};

}  // namespace tf::backend::cpu_parts
