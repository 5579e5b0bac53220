// Session: what a stirgpu projector (or the two projectors of a pair) does between STIR and
// stirgpu's Python engine.
//
// STIR calls a projector per related viewgrams (one viewgram: the symmetries are trivial),
// from OpenMP threads.  A Session turns that into few, large projections:
//
// * forward: the image is uploaded to every GPU once, at set_input.  The first viewgram asked
//   for that is not cached yet is projected together with the rest of its subset (every
//   segment, the views of the subset's view rule, every timing position of TOF data, at most
//   `cache budget` bytes), into host memory owned here; that viewgram and the following ones
//   are copied out of it without Python.  The cache lives until the next set_input.  STIR asks
//   for TOF viewgrams one timing position at a time (its loop runs over timing positions, then
//   views), so one projection of all timing positions serves every position's calls.
// * back: viewgrams (each timing position its own) are copied into host memory owned here (no
//   Python), back projected in one call at get_output (or when they reach the cache budget) and accumulated on the GPUs, and
//   copied once into STIR's image at get_output.
// * the subset's view rule is learnt from the views STIR asks for: STIR's subsets are the
//   views v with (v - min view) % N == subset (find_basic_vs_nums_in_subset), so the views of
//   one set_input (or start_accumulating_in_new_target) period tell N; until then the views
//   asked so far in the period give it (one view: that view alone).  A wrong guess costs a
//   second projection, never a wrong number: a viewgram is only ever taken from the cache.
//
// Threads: one mutex guards the caches; a thread that must project holds it while Python
// runs, so the others wait for that projection rather than start their own.  The GIL is
// taken only for Python calls (lock order: mutex, then GIL).  Inside STIR's Python module
// the thread running STIR holds the GIL, so no other thread could ever run Python: there
// STIR's OpenMP loops are set to one thread at set_input / start_accumulating_in_new_target.
// When the GPUs project, STIR's executables get one thread there too unless OMP_NUM_THREADS
// says otherwise: STIR's own loop around the projector was measured slower with more threads
// (docs/stir-plugin.md).
//
// Errors: a Python exception becomes a STIR error (stir::error, a std::runtime_error), unless
// it happens inside one of STIR's OpenMP loops, where an exception would end the process: it
// is then kept, the viewgram is filled with NaN, and the error is raised by the next call
// outside the loop (get_output, set_input, ...).
#ifndef STIRGPU_STIR_PLUGIN_SESSION_H
#define STIRGPU_STIR_PLUGIN_SESSION_H

#include "stir/DiscretisedDensity.h"
#include "stir/ProjData.h"
#include "stir/ProjDataInfo.h"
#include "stir/RelatedViewgrams.h"
#include "stir/shared_ptr.h"

#include <pybind11/pybind11.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace stirgpu_plugin
{

//! The keys of a "... Using stirgpu Parameters" block (stirgpu's own block: the same keys).
struct Options
{
  std::string backend = "auto";
  std::vector<int> devices;        //!< empty: all GPUs
  int gpu_memory_budget_mb = -1;   //!< -1: stirgpu's default
  int host_memory_budget_mb = -1;  //!< -1: stirgpu's default; also bounds the plugin's caches
  int max_views_per_chunk = -1;    //!< -1: no bound
  bool restrict_to_cylindrical_fov = true;
  int verbosity = 0;

  bool operator==(const Options& o) const;
  //! "" when valid, else what is wrong (the key named)
  std::string problem() const;
};

//! (segment, view, timing position) of one viewgram (timing position 0 for non-TOF data)
using ViewgramKey = std::tuple<int, int, int>;

//! What the per-viewgram calls of one period (set_input to set_input, or
//! start_accumulating_in_new_target to get_output) cost outside stirgpu's projections: the
//! trace's "forward viewgrams" / "back viewgrams" lines, which tell the plugin's share of
//! STIR's loop from STIR's own.
struct CallCounters
{
  long calls = 0;
  double seconds_waiting = 0;  //!< for the session lock, summed over threads
  double seconds_copying = 0;  //!< holding it, outside Python (copies, bookkeeping)
  double seconds_python = 0;   //!< in stirgpu's projections started by these calls

  //! one call: from `start` (before the lock), `locked` (lock taken) to now, of which
  //! `python` seconds were projections
  void add(std::chrono::steady_clock::time_point start, std::chrono::steady_clock::time_point locked, double python);
};

class Session
{
public:
  explicit Session(const Options& options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  Options& options() { return options_; }

  //! STIR's set_up; a second call with the same geometry keeps what is set up (a pair's two
  //! projectors both call it).
  void set_up(const stir::shared_ptr<const stir::ProjDataInfo>& pdi,
              const stir::shared_ptr<const stir::DiscretisedDensity<3, float>>& image_info);
  void set_input(const stir::DiscretisedDensity<3, float>& image);
  void forward_project(stir::RelatedViewgrams<float>& viewgrams);
  void start_accumulating();
  void back_project(const stir::RelatedViewgrams<float>& viewgrams);
  void get_output(stir::DiscretisedDensity<3, float>& image);

  //! A call the session cannot serve: a STIR error, or later inside an OpenMP loop.
  void refuse(const std::string& what);

  //! The whole-ProjData calls: streamed by stirgpu, only the subset's views touched.
  void forward_project(stir::ProjData& out, int subset_num, int num_subsets);
  void back_project(const stir::ProjData& in, int subset_num, int num_subsets);

private:
  struct Buffers
  {
    std::map<ViewgramKey, std::vector<float>> viewgrams;
    std::size_t bytes = 0;
  };

  void require_set_up(const char* what) const;
  void raise_pending();
  // report a failure (mutex held): a STIR error now, or kept for later inside an OpenMP loop
  void fail(std::unique_lock<std::mutex>& lock, const std::string& what);
  void learn_from(std::set<int>& views);
  std::vector<int> batch_views(int view) const;
  // these two return the seconds spent in Python
  double project_batch(const std::vector<int>& views);
  double flush_back_projection();
  void choose_stir_threads();
  pybind11::dict as_numpy(Buffers& buffers);
  // hand a period's counters to the bridge (trace, verbosity) and start new ones; a trace that
  // cannot be written is a warning, but Ctrl-C there is returned (its message), never swallowed
  std::string report(const char* what, CallCounters& counters);
  std::vector<int> segments() const;
  //! STIR's timing position numbers of the data (one, 0, for non-TOF data)
  std::vector<int> timing_positions() const;
  //! "" when STIR's viewgram is one of the set-up's timing positions, else what is wrong
  std::string timing_problem(const stir::Viewgram<float>& vg) const;

  Options options_;
  Options python_options_;  // the options the Python session was made with
  std::mutex mutex_;
  pybind11::object* python_ = nullptr;  // the bridge's PairSession (deleted with the GIL)
  stir::shared_ptr<const stir::ProjDataInfo> pdi_;
  stir::shared_ptr<const stir::DiscretisedDensity<3, float>> image_info_;
  std::size_t cache_budget_ = 0;
  bool has_input_ = false;
  bool gpus_project_ = false;  // the Python session's backend is CUDA
  bool accumulating_ = false;

  Buffers forward_cache_;
  Buffers back_staged_;
  std::set<int> forward_views_;  // views asked for since set_input
  std::set<int> back_views_;     // views given since start_accumulating_in_new_target
  int learnt_num_subsets_ = 0;   // 0: not known
  CallCounters forward_counters_;
  CallCounters back_counters_;

  std::string pending_error_;
};

} // namespace stirgpu_plugin

#endif
