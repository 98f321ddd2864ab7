// The offload search's starts, on worker threads, and its reruns at targets around the budget
// (the search itself: Note [Offload search] in solver_offload.cpp).
//
// Note [Targets around the budget]
// Rationale: below the least budget recompute alone meets, the greedy search's plans move
//   by ten points between nearby budgets (ResNet-152 batch 64 over 50 GB/s: +34% at 0.20x,
//   +46% at 0.205x, +38% at 0.21x, +26% at 0.215x), the worse ones stalling on copies the
//   link cannot carry in time, where a plan for a nearby budget does not.
// Approach: where the best plan stalls for 5% of the iteration's compute or more, the
//   starts run again with 97.5% and 95% of the budget as their target (such a plan fits
//   this budget as it is) and with 105% (cover_by_trial brings it under this one, then
//   the improvement passes and the pack pass run; 107.5% as well took 0.205x from +28.1%
//   to +27.7% for another search). The plan of least added time that fits wins:
//   ResNet-152 at 0.205x +28%, at 0.21x +26% (docs/offload.md, "Choosing").
// Limitations: it costs three searches more where it runs, found better or not
//   (ResNet-152 at 0.20x: 9.6 s against 1.8 s on two threads). The greedy cover prices
//   each buffer alone; bringing such a plan down, it raised the peak elsewhere by up to
//   1 GiB (recipes' working sets piling up late in the backward pass), so the trial
//   cover simulates every change at the peak each round instead. A budget whose nearby
//   targets all stall keeps its own plan (0.20x: +34%). Below 5% of stalls (ResNet-1001
//   at 0.19x, DenseNet-121 at 0.15x) a rerun doubled the time and found nothing better.
//
// Note [Parallel offload starts]
// Rationale: the offload search runs from up to seventeen starts, each thousands of
//   simulated plans (seconds on a deep model, paid once after the traced iterations), from
//   seeds that are recompute searches (one or two) at four budgets; all of it is
//   independent but for a start waiting on its seed.
// Approach: jobs on a queue: the recompute searches (each at the budget and 5%, 30% and
//   100% above it), the two starts from nothing, and, as each search is done, the starts
//   from its plan (none where an earlier seed was the same plan). Worker threads, each
//   with a context of its own over the same iteration, and then the calling thread, on
//   the caller's, take them in order. The results are compared in a fixed order (the
//   recompute-only plan, its start, the seeds' in ladder order, the second search's in
//   ladder order, the two from nothing), ties to the earlier; each job's result depends
//   only on the iteration, its budget and its seed (the solvers' caches in a context say
//   only which budgets no plan of theirs meets), so the plan is the same for any number
//   of threads (planner::options::threads; 1: all on the calling thread).
// Limitations: each worker builds its own context (dataflow, candidates), and a
//   recompute search on a worker refills its solvers' tables there; a start waits for its
//   seed, so the longest seed and start bound the time.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "policy/solvers.hpp"

namespace sublinear::policy {

using evaluation = planner::context::evaluation;

namespace {

// A job of with_offload's search (Note [Parallel offload starts]): an offload search
// from a seed (nullptr: from nothing), offloads first or not; or, with `recompute` set,
// the recompute search of seed slot `slot`, whose plan becomes that slot's seed.
struct offload_job {
  const evaluation* seed = nullptr;
  bool offload_first = false;
  int key = 0;           // a start's place in the comparison (ties to the smaller)
  bool recompute = false;
  std::size_t slot = 0;  // a recompute job's seed slot
};

// Runs the jobs, on worker threads where there are cores for them, and gives back the
// starts' results in the order of their keys. Seed slot s is search s / budgets at
// budget s % budgets; a recompute job queues the starts from its seed when it is done.
class job_runner {
 public:
  job_runner(planner::context& ctx, std::size_t budget, std::vector<const recompute_search*> searches,
             std::vector<std::size_t> budgets)
      : ctx_(ctx),
        budget_(budget),
        searches_(std::move(searches)),
        budgets_(std::move(budgets)),
        workers_(ctx.offload().threads > 1 ? ctx.offload().threads - 1 : 0),
        seeds_(searches_.size() * budgets_.size()) {}

  [[nodiscard]] std::size_t seed_slots() const noexcept { return seeds_.size(); }
  job_runner(const job_runner&) = delete;
  job_runner& operator=(const job_runner&) = delete;
  ~job_runner() {  // unwinding: the workers stop after the job each is on
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stopped_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // The seed of recompute job `slot` once finish() has returned (empty: none met its budget).
  std::optional<evaluation>& seed(std::size_t slot) { return seeds_[slot]; }

  // Queues a job (the calling thread only); without workers, runs it here (a recompute
  // job runs its starts too).
  void add(const offload_job& job) {
    if (workers_ == 0) {
      run(ctx_, job);
      return;
    }
    const std::size_t queued = enqueue(job);
    if (threads_.size() < workers_ && threads_.size() < queued) threads_.emplace_back([this] { work(nullptr); });
  }

  // Runs what is left on this thread too and waits for the rest; the starts' results by
  // key (equal keys in the order queued).
  std::vector<std::optional<evaluation>> finish() {
    if (!threads_.empty()) {
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        closed_ = true;
      }
      ready_.notify_all();
      work(&ctx_);
      for (std::thread& t : threads_) t.join();
      threads_.clear();
      if (failure_) std::rethrow_exception(failure_);
    }
    std::stable_sort(results_.begin(), results_.end(), [](const keyed& a, const keyed& b) { return a.key < b.key; });
    std::vector<std::optional<evaluation>> out;
    for (keyed& r : results_) out.push_back(std::move(r.result));
    return out;
  }

 private:
  std::size_t enqueue(const offload_job& job) {
    std::size_t queued = 0;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (stopped_) return 0;
      jobs_.push_back(job);
      queued = jobs_.size();
    }
    ready_.notify_one();
    return queued;
  }

  // A recompute job's starts: queued for any thread, or run here without workers.
  void follow(planner::context& ctx, const offload_job& job) {
    if (workers_ == 0) {
      run(ctx, job);
    } else {
      (void)enqueue(job);
    }
  }

  void run(planner::context& ctx, const offload_job& job) {
    if (!job.recompute) {
      std::optional<evaluation> r = job.offload_first ? solve_offload_then_recompute(ctx, budget_, job.seed)
                                                      : solve_offload(ctx, budget_, true, job.seed);
      const std::lock_guard<std::mutex> lock(mutex_);
      results_.push_back({job.key, std::move(r)});
      return;
    }
    const std::size_t per_search = budgets_.size();
    std::optional<evaluation> seed = (*searches_[job.slot / per_search])(ctx, budgets_[job.slot % per_search]);
    bool repeats = !seed.has_value();  // an equal seed's starts give the same results, at a smaller key
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      seeds_[job.slot] = std::move(seed);
      const evaluation* mine = repeats ? nullptr : &*seeds_[job.slot];
      for (std::size_t j = 1; j < job.slot && !repeats; ++j) {
        repeats = seeds_[j] && seeds_[j]->dropped == mine->dropped && seeds_[j]->horizons == mine->horizons;
      }
    }
    if (repeats) return;
    const evaluation* s = &*seeds_[job.slot];
    if (job.slot == 0) {
      follow(ctx, {s, false, 0});
      return;
    }
    const int key = 2 * static_cast<int>(job.slot) - 1;
    follow(ctx, {s, false, key});
    follow(ctx, {s, true, key + 1});
  }

  // Takes jobs until none is left and none will come (none queued, none running, and
  // finish() called). A worker builds a context of its own (a context is not
  // thread-safe); the calling thread, once it has queued its jobs, works on the caller's.
  void work(planner::context* own) {
    std::optional<planner::context> local;
    for (;;) {
      offload_job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [&] { return stopped_ || next_ < jobs_.size() || (closed_ && running_ == 0); });
        if (stopped_ || next_ >= jobs_.size()) return;
        job = jobs_[next_++];
        ++running_;
      }
      try {
        if (own == nullptr && !local) local.emplace(ctx_.graph(), ctx_.multi_pass(), ctx_.packs(), ctx_.offload());
        run(own != nullptr ? *own : *local, job);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!failure_) failure_ = std::current_exception();
        stopped_ = true;
      }
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        --running_;
      }
      ready_.notify_all();  // the last job done ends the wait; a recompute job may have queued starts
    }
  }

  struct keyed {
    int key;
    std::optional<evaluation> result;
  };
  planner::context& ctx_;
  const std::size_t budget_;
  const std::vector<const recompute_search*> searches_;
  const std::vector<std::size_t> budgets_;
  const std::size_t workers_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<offload_job> jobs_;  // queued, in order
  std::size_t next_ = 0;           // the next job to take
  std::size_t running_ = 0;        // jobs taken and not done
  bool closed_ = false;            // finish() called: the caller queues no more
  bool stopped_ = false;           // a job failed, or unwinding: take no more
  std::exception_ptr failure_;
  std::deque<std::optional<evaluation>> seeds_;  // fixed slots: stable addresses for the starts
  std::vector<keyed> results_;
};

// The offload search's starts at one target budget (Note [Parallel offload starts]), the
// best plan they find, packed where `pack` (Note [Offload pack search]; the rerun at a
// larger target packs its plan only once the trial cover has brought it under the budget).
std::optional<evaluation> offload_starts(planner::context& ctx, std::size_t budget, const recompute_search& search,
                                         const recompute_search& also, bool pack = true) {
  // Slot 0: the budget's own recompute plan; 1..3: larger budgets, whose plans keep more
  // checkpoints and recompute shorter segments (offloading those checkpoints may meet
  // this budget for less); then `also`'s at the same budgets. Slot s's starts have keys
  // 2s - 1 and 2s (slot 0: key 0 only); the two from nothing come last.
  const std::size_t top = ctx.unplanned_peak();
  std::vector<std::size_t> budgets{budget};
  for (const double step : {0.05, 0.3, 1.0}) {
    const auto b = static_cast<std::size_t>(static_cast<double>(budget) * (1.0 + step));
    if (b >= top) break;
    budgets.push_back(b);
  }
  std::vector<const recompute_search*> searches{&search};
  if (also) searches.push_back(&also);
  job_runner runner(ctx, budget, std::move(searches), std::move(budgets));
  const std::size_t slots = runner.seed_slots();
  for (std::size_t s = 0; s < slots; ++s) runner.add({nullptr, false, 0, true, s});
  const int last = 2 * static_cast<int>(slots);
  runner.add({nullptr, false, last});
  runner.add({nullptr, true, last + 1});
  std::vector<std::optional<evaluation>> results = runner.finish();
  std::optional<evaluation> best = std::move(runner.seed(0));
  for (std::optional<evaluation>& e : results) {
    if (e) order_copies_out_if_better(ctx, budget, *e);  // Note [Copies out by deadline]
    if (e && (!best || e->sim.added_time_s() < best->sim.added_time_s())) best = std::move(e);
  }
  if (best && pack) pack_offloads(ctx, budget, *best);  // Note [Offload pack search]; its plans ordered too
  return best;
}

}  // namespace

std::optional<evaluation> with_offload(planner::context& ctx, std::size_t budget, const recompute_search& search,
                                       const recompute_search& also) {
  switch (ctx.offload().mode) {
    case offload_mode::off:
      return search(ctx, budget);
    case offload_mode::only: {
      std::optional<evaluation> only = solve_offload(ctx, budget, false);
      if (only) order_copies_out_if_better(ctx, budget, *only);  // Note [Copies out by deadline]
      if (only) add_fetch_margin(ctx, budget, *only, ctx.offload().fetch_margin);  // Note [Fetch margin]
      return only;
    }
    case offload_mode::on:
      break;
  }
  std::optional<evaluation> best = offload_starts(ctx, budget, search, also);
  // Reruns at targets around the budget where the plan stalls for 5% of the iteration's
  // compute or more (Note [Targets around the budget]); the iteration's compute is the
  // predicted time less what the plan adds.
  const bool stalls = best && best->sim.predicted_stall_s > 0.0 &&
                      best->sim.predicted_stall_s >= 0.05 * (best->sim.predicted_time_s - best->sim.added_time_s());
  for (const double f : {0.975, 0.95, 1.05}) {
    if (!ctx.offload().rerun_targets || !stalls) break;
    std::optional<evaluation> e =
        offload_starts(ctx, static_cast<std::size_t>(static_cast<double>(budget) * f), search, also, f < 1.0);
    if (e && f > 1.0) {
      e = solve_offload_from_larger(ctx, budget, *e);
      if (e) order_copies_out_if_better(ctx, budget, *e);  // Note [Copies out by deadline]
      if (e) pack_offloads(ctx, budget, *e);                // Note [Offload pack search]
    }
    if (e && e->fits(budget) && e->sim.added_time_s() < best->sim.added_time_s() * (1.0 - 1e-12)) best = std::move(e);
  }
  if (best) add_fetch_margin(ctx, budget, *best, ctx.offload().fetch_margin);  // Note [Fetch margin]
  return best;
}

}  // namespace sublinear::policy
