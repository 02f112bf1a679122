#pragma once
/// The CUDA backend's recurrent-state store: one slot per running stream (or kept prompt) in
/// device memory, each holding the f32 state of every recurrent layer.
#include <tf/backend/backend.hpp>
#include <tf/backend/cuda/device.hpp>
#include <tf/error.hpp>

#include <cstdint>

namespace tf::backend::cuda_parts {

class state_store {
 public:
  state_store() = default;
  state_store(std::int32_t slots, state_layout layout) : slots_(slots), layout_(layout) {
    if (slots < 0 || layout.layers < 0 || layout.floats < 0)
      throw error("tf: a state store of {} slots of {} layers x {} floats", slots, layout.layers,
                  layout.floats);
    data_.assign_zero(static_cast<std::size_t>(slots) * slot_floats());
  }

  std::int32_t slots() const { return slots_; }
  state_layout layout() const { return layout_; }
  std::int64_t slot_bytes() const {
    return static_cast<std::int64_t>(state_bytes_per_slot(layout_));
  }

  /// Slot s's state of recurrent layer `layer` [layout.floats], in device memory.
  float* at(std::int32_t s, int layer) {
    check_slot(s);
    return data_.data() + static_cast<std::size_t>(s) * slot_floats() +
           static_cast<std::size_t>(layer) * static_cast<std::size_t>(layout_.floats);
  }

  /// Slot `to` becomes a copy of slot `from`.
  void copy(std::int32_t from, std::int32_t to) {
    check_slot(from);
    check_slot(to);
    if (from == to) return;
    auto const n = slot_floats();
    check(cudaMemcpy(data_.data() + static_cast<std::size_t>(to) * n,
                     data_.data() + static_cast<std::size_t>(from) * n, n * sizeof(float),
                     cudaMemcpyDeviceToDevice),
          "state slot copy");
  }

 private:
  std::size_t slot_floats() const {
    return static_cast<std::size_t>(layout_.layers) * static_cast<std::size_t>(layout_.floats);
  }
  void check_slot(std::int32_t s) const {
    if (s < 0 || s >= slots_) throw error("tf: state slot {} is outside 0..{}", s, slots_ - 1);
  }

  std::int32_t slots_ = 0;
  state_layout layout_;
  device_array<float> data_;
};

}  // namespace tf::backend::cuda_parts
