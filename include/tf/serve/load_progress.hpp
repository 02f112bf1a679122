#pragma once
/// Progress of a start's weight read: bytes read of total, rate and ETA, as one updating line on a
/// terminal or one line per 10% otherwise (a log keeps every line), and the fraction /health shows.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace tf::serve {

namespace detail {

/// `bytes` in MiB below 1 GiB, else GiB, two decimals.
inline std::string size_text(std::uint64_t bytes) {
  double const mib = static_cast<double>(bytes) / double(1 << 20);
  return mib < 1024 ? fmt::format("{:.2f} MiB", mib) : fmt::format("{:.2f} GiB", mib / 1024);
}

}  // namespace detail

/// Turns (bytes read, seconds since the read began) into progress text for `out`.
class load_progress_printer {
 public:
  /// `tty`: rewrite one line with '\r'; otherwise a line each time another 10% is read.
  load_progress_printer(std::uint64_t total, bool tty, std::function<void(std::string_view)> out)
      : total_(total), tty_(tty), out_(std::move(out)) {}

  /// Reports `done` bytes after `seconds`; prints only when the text has something new.
  void update(std::uint64_t done, double seconds) {
    if (finished_ || done == 0 || total_ == 0) return;
    done = std::min(done, total_);
    if (tty_) {
      // \x1b[K clears what a longer earlier line left.
      out_(fmt::format("\r{}\x1b[K", line(done, seconds)));
      drawn_ = true;
      return;
    }
    // A jump over several steps prints one line, at the step reached.
    int const step = static_cast<int>(done * 10 / total_);
    if (step <= step_) return;
    step_ = step;
    out_(line(done, seconds) + "\n");
  }

  /// The closing line: what was read and how fast; ends the terminal's updating line.
  void finish(std::uint64_t done, double seconds) {
    if (finished_) return;
    finished_ = true;
    auto const rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
    auto const text =
        fmt::format("tf: read {} of weights in {:.1f} s ({}/s)", detail::size_text(done), seconds,
                    detail::size_text(static_cast<std::uint64_t>(rate)));
    out_(tty_ && drawn_ ? fmt::format("\r{}\x1b[K\n", text) : text + "\n");
  }

  /// "tf: reading weights: A of B (P%), R/s, ETA S s".
  std::string line(std::uint64_t done, double seconds) const {
    double const frac = static_cast<double>(done) / static_cast<double>(total_);
    double const rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
    std::string eta = "ETA -";
    if (rate > 0) eta = fmt::format("ETA {:.0f} s", static_cast<double>(total_ - done) / rate);
    return fmt::format("tf: reading weights: {} of {} ({:.0f}%), {}/s, {}", detail::size_text(done),
                       detail::size_text(total_), 100 * frac,
                       detail::size_text(static_cast<std::uint64_t>(rate)), eta);
  }

 private:
  std::uint64_t total_;
  bool tty_;
  std::function<void(std::string_view)> out_;
  int step_ = 0;
  bool drawn_ = false;
  bool finished_ = false;
};

/// Polls a byte counter on its own thread every `period`, feeding a printer and a fraction sink
/// (the server's /health progress) until finish() or destruction.
class load_progress_watch {
 public:
  using clock = std::chrono::steady_clock;

  load_progress_watch(std::function<std::uint64_t()> bytes, std::uint64_t total,
                      load_progress_printer printer, std::function<void(double)> fraction,
                      std::chrono::milliseconds period = std::chrono::milliseconds(200))
      : bytes_(std::move(bytes)),
        total_(total),
        printer_(std::move(printer)),
        fraction_(std::move(fraction)),
        start_(clock::now()) {
    thread_ = std::thread([this, period] {
      std::unique_lock lock(mutex_);
      while (!stop_) {
        poll();
        wake_.wait_for(lock, period, [this] { return stop_; });
      }
    });
  }
  load_progress_watch(load_progress_watch const&) = delete;
  load_progress_watch& operator=(load_progress_watch const&) = delete;
  ~load_progress_watch() { finish(); }

  /// Stops polling and prints the closing line (once).
  void finish() {
    {
      std::lock_guard lock(mutex_);
      if (stop_) return;
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    auto const done = std::min(bytes_(), total_);
    report(done);
    printer_.finish(done, seconds());
  }

 private:
  double seconds() const { return std::chrono::duration<double>(clock::now() - start_).count(); }
  void report(std::uint64_t done) {
    if (total_ > 0) fraction_(static_cast<double>(done) / static_cast<double>(total_));
  }
  void poll() {
    auto const done = std::min(bytes_(), total_);
    report(done);
    printer_.update(done, seconds());
  }

  std::function<std::uint64_t()> bytes_;
  std::uint64_t total_;
  load_progress_printer printer_;
  std::function<void(double)> fraction_;
  clock::time_point start_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tf::serve
