// Two training runs taking turns, one iteration each, so that their times can be compared
// iteration by iteration on a machine whose speed drifts.
//
// Note [Paired timing]
// Rationale: this machine's speed drifts by up to 30% within minutes (other tenants of the
//   host), so a baseline timed a minute before a planned run gives ratios whose noise is
//   larger than the effects under study (the same sqrtn plan can measure 1.5x at one
//   budget and 2.1x at another).
// Approach: every planned run trains beside a baseline twin (same model, seed and
//   batches) in its own session that leaves the process-default allocator alone
//   (host_session_options::install_default), on a second thread. A pacer hands the turn
//   over after each iteration, so exactly one of the two runs at any time (each
//   iteration ends with a device synchronize, so the idle side's stream workers are idle
//   too) and iteration i of both lies within a second or two. A run's ratio is the
//   median over its steady iterations of its time over its twin's same iteration, for
//   wall and for CPU time.
// Limitations: every planned run costs a baseline run more. Planning happens in the
//   run's turn, so the twin waits for it and it is not timed. When the run ends early
//   (no plan), its twin ends once it has caught up. Users: remat_sweeps (every planned
//   run) and `sublinear demo` (its baseline beside the budgeted run).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace sublinear::workloads {

class pacer {
 public:
  // A side's share of the run: waits for its first turn at construction and gives the
  // turn up for good at destruction (null: no pacing). Declare it before the session, so
  // that the other side resumes only once this side's session is gone.
  class turns {
   public:
    turns(pacer* p, int side) : p_(p), side_(side) {
      if (p_ != nullptr) p_->wait_turn(side_);
    }
    ~turns() {
      if (p_ != nullptr) p_->finish(side_);
    }
    turns(const turns&) = delete;
    turns& operator=(const turns&) = delete;
    // After iteration `index` of `iterations`: hands the turn over and waits for it back,
    // except after the last, where the destructor passes it.
    void after_iteration(std::int64_t index, std::int64_t iterations) {
      if (p_ == nullptr) return;
      p_->completed_one(side_);
      if (index + 1 >= iterations) return;
      p_->pass(side_);
      p_->wait_turn(side_);
    }
    // The other side has finished and this one has run as many iterations as it did.
    [[nodiscard]] bool caught_up_with_finished() {
      if (p_ == nullptr) return false;
      const std::lock_guard lock(p_->mutex_);
      return p_->done_[1 - side_] && p_->completed_[side_] >= p_->completed_[1 - side_];
    }

   private:
    pacer* p_;
    int side_;
  };

 private:
  // Side 0 (the run) goes first.
  void wait_turn(int side) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return turn_ == side || done_[1 - side]; });
  }
  void pass(int side) {
    {
      const std::lock_guard lock(mutex_);
      turn_ = 1 - side;
    }
    cv_.notify_all();
  }
  void finish(int side) {
    {
      const std::lock_guard lock(mutex_);
      done_[side] = true;
      turn_ = 1 - side;
    }
    cv_.notify_all();
  }
  void completed_one(int side) {
    const std::lock_guard lock(mutex_);
    ++completed_[side];
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  int turn_ = 0;
  bool done_[2] = {false, false};
  std::int64_t completed_[2] = {0, 0};
};

}  // namespace sublinear::workloads
