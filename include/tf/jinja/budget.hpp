#pragma once
/// tf::jinja render limits: a chat template is untrusted code (it ships inside model files), so
/// every render runs under a budget of steps, time, nesting, output and value sizes, and a
/// template that exceeds one is stopped with a tf::error that names the limit.
#include <tf/error.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <optional>

namespace tf::jinja {

/// Render-time settings and limits.
struct render_options {
  /// Time strftime_now() formats; the current time when empty (tests fix it).
  std::optional<std::time_t> now;
  /// Deepest nesting of statements, expressions and macro calls during a render, and of the
  /// values a template builds or is given (no stack overflow).
  int max_depth = 512;
  /// Total work per render: one step per statement and expression, four per loop iteration,
  /// one per 64 bytes of string and per 4 items of list a template builds, and filters charge
  /// their inner loops. The real templates in fixtures/jinja take 100 to 300 steps per message
  /// (Gemma 4's ~3,000 at 1,000 messages: it looks ahead over the rest of the conversation);
  /// a Release build runs about 2 to 4 million steps a second.
  std::uint64_t max_steps = 10'000'000;
  /// Largest rendered output, and largest string any expression may build.
  std::size_t max_output_bytes = std::size_t{16} << 20;
  /// Largest list or mapping any expression may build (range() included).
  std::size_t max_items = 1'000'000;
  /// Wall-clock time per render, checked every 1024 steps.
  double max_seconds = 10.0;
  /// When set, receives the steps the render took (also when it failed), for measurements.
  std::uint64_t* steps_used = nullptr;
};

namespace detail {

/// One render's account of steps and time; the evaluator makes one and installs it for the
/// thread while it runs, so filters and methods deep below it can charge their loops.
class budget {
 public:
  explicit budget(const render_options& opt)
      : opt_(opt), start_(std::chrono::steady_clock::now()) {}

  void charge(std::uint64_t n) {
    steps_ += n;
    if (steps_ > opt_.max_steps)
      throw tf::error(
          "jinja: the template ran past its limit of {} steps (a runaway loop?); "
          "render_options::max_steps raises it",
          opt_.max_steps);
    if (steps_ >= next_clock_) {
      next_clock_ = steps_ + 1024;
      std::chrono::duration<double> spent = std::chrono::steady_clock::now() - start_;
      if (spent.count() > opt_.max_seconds)
        throw tf::error(
            "jinja: the template ran past its time limit of {} s (after {} steps); "
            "render_options::max_seconds raises it",
            opt_.max_seconds, steps_);
    }
  }
  void check_bytes(std::size_t n) const {
    if (n > opt_.max_output_bytes)
      throw tf::error(
          "jinja: the template built more than {} bytes of text; "
          "render_options::max_output_bytes raises the limit",
          opt_.max_output_bytes);
  }
  void check_items(std::size_t n) const {
    if (n > opt_.max_items)
      throw tf::error(
          "jinja: the template built a list or mapping of more than {} items; "
          "render_options::max_items raises the limit",
          opt_.max_items);
  }
  void check_depth(std::size_t d) const {
    if (d > static_cast<std::size_t>(opt_.max_depth))
      throw tf::error("jinja: the template built a value nested deeper than {}", opt_.max_depth);
  }
  std::uint64_t steps() const { return steps_; }
  const render_options& options() const { return opt_; }

 private:
  render_options opt_;
  std::chrono::steady_clock::time_point start_;
  std::uint64_t steps_ = 0;
  std::uint64_t next_clock_ = 1024;
};

/// The budget of the render running on this thread, or null outside a render.
inline thread_local budget* active_budget = nullptr;

/// Installs `b` for the thread until destroyed (renders may nest: the outer one comes back).
class budget_scope {
 public:
  explicit budget_scope(budget& b) : prev_(active_budget) { active_budget = &b; }
  ~budget_scope() { active_budget = prev_; }
  budget_scope(const budget_scope&) = delete;
  budget_scope& operator=(const budget_scope&) = delete;

 private:
  budget* prev_;
};

/// Charges `n` steps to the running render (nothing outside one).
inline void charge(std::uint64_t n = 1) {
  if (active_budget) active_budget->charge(n);
}
/// Charges for a string of `bytes` built, and checks it against the size limit.
inline void charge_bytes(std::size_t bytes) {
  if (!active_budget) return;
  active_budget->check_bytes(bytes);
  active_budget->charge(1 + bytes / 64);
}
/// Charges for a list or mapping of `items` built, and checks it against the size limit.
inline void charge_items(std::size_t items) {
  if (!active_budget) return;
  active_budget->check_items(items);
  active_budget->charge(1 + items / 4);
}
/// Checks a growing string against the size limit without charging (for loops that charge
/// per iteration already).
inline void check_bytes(std::size_t bytes) {
  if (active_budget) active_budget->check_bytes(bytes);
}
inline void check_items(std::size_t items) {
  if (active_budget) active_budget->check_items(items);
}

}  // namespace detail

}  // namespace tf::jinja
