#include "session.h"

#include "lookalikes.h"
#include "lor_endpoints.h"
#include "python_runtime.h"
#include "viewgram_copy.h"

#include "stir/Viewgram.h"
#include "stir/error.h"
#include "stir/info.h"
#include "stir/warning.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace py = pybind11;

namespace stirgpu_plugin
{

namespace
{

const std::string PREFIX = "stirgpu: ";

using Clock = std::chrono::steady_clock;

double
seconds_between(Clock::time_point a, Clock::time_point b)
{
  return std::chrono::duration<double>(b - a).count();
}

// inside one of STIR's OpenMP loops (active or not): an exception must not leave it
bool
inside_openmp_loop()
{
  return omp_get_level() > 0;
}

// a numpy array over memory the plugin (or STIR) owns; Python only uses it during the call
template <class T>
py::array_t<float>
borrowed_array(std::vector<py::ssize_t> shape, T* data)
{
  py::array_t<float> a(shape, const_cast<float*>(data), py::capsule(data, [](void*) {}));
  if (std::is_const<T>::value)
    a.attr("setflags")(py::arg("write") = false);
  return a;
}

std::vector<py::ssize_t>
image_shape(const stir::DiscretisedDensity<3, float>& image)
{
  const stir::IndexRange<3> r = image.get_index_range();
  const int nz = r.get_length();
  const int ny = r[r.get_min_index()].get_length();
  const int nx = r[r.get_min_index()][r[r.get_min_index()].get_min_index()].get_length();
  return { nz, ny, nx };
}

// the bridge's session for this geometry: stirgpu's own LOR tables (cylindrical scanners), or
// the LOR endpoints STIR gives (block and generic scanners; lor_endpoints.h); GIL held
py::object
make_python_session(PythonRuntime& rt, const stir::shared_ptr<const stir::ProjDataInfo>& pdi,
                    const stir::DiscretisedDensity<3, float>& image, const py::dict& opts)
{
  if (!needs_lor_endpoints(*pdi))
    return rt.bridge().attr("PairSession")(proj_data_info_lookalike(pdi), image_lookalike(image), opts);
  const std::string problem = lor_endpoints_problem(*pdi, image);
  if (!problem.empty())
    throw std::invalid_argument(problem);
  rt.bridge();  // (the look-alikes' module first)
  return py::module_::import("stirgpu.stir_plugin.bridge_endpoints")
      .attr("EndpointSession")(lor_endpoints(*pdi, image), image_lookalike(image), opts);
}

} // namespace

bool
Options::operator==(const Options& o) const
{
  return backend == o.backend && devices == o.devices && gpu_memory_budget_mb == o.gpu_memory_budget_mb
         && host_memory_budget_mb == o.host_memory_budget_mb && max_views_per_chunk == o.max_views_per_chunk
         && restrict_to_cylindrical_fov == o.restrict_to_cylindrical_fov && verbosity == o.verbosity;
}

std::string
Options::problem() const
{
  if (backend != "auto" && backend != "cpu" && backend != "cuda")
    return "backend must be auto, cpu or cuda, not '" + backend + "'";
  for (int d : devices)
    if (d < 0)
      return "devices must be >= 0";
  if (gpu_memory_budget_mb == 0 || gpu_memory_budget_mb < -1)
    return "GPU memory budget (MB) must be >= 1";
  if (host_memory_budget_mb == 0 || host_memory_budget_mb < -1)
    return "host memory budget (MB) must be >= 1";
  if (max_views_per_chunk == 0 || max_views_per_chunk < -1)
    return "maximum views per chunk must be >= 1";
  return "";
}

void
CallCounters::add(Clock::time_point start, Clock::time_point locked, double python)
{
  ++calls;
  seconds_waiting += seconds_between(start, locked);
  seconds_copying += seconds_between(locked, Clock::now()) - python;
  seconds_python += python;
}

Session::Session(const Options& options)
    : options_(options)
{}

Session::~Session()
{
  if (!pending_error_.empty())
    stir::warning(PREFIX + "an error was never reported to STIR: " + pending_error_);
  if (python_ != nullptr && !PythonRuntime::python_is_running())
    {
      // the Python that made the session is finalising (or gone): this projector is being
      // destroyed with the Python objects of STIR's module at the exit of the process (a
      // script that ends without deleting its reconstruction).  Its Python session is left
      // as it is: running Python now would run it on a thread that no longer holds the GIL
      // once the call returns, and the process ends anyway.
      return;
    }
  if (python_ != nullptr)
    {
      try
        {
          for (const std::string& stop :
               { report("forward viewgrams", forward_counters_), report("back viewgrams", back_counters_) })
            if (!stop.empty())
              stir::warning(PREFIX + "closing the projector: " + stop);
          PythonRuntime::get().call([this] {
            python_->attr("close")();
            delete python_;
          });
        }
      catch (const std::exception& e)
        {
          stir::warning(PREFIX + "closing the projector failed: " + e.what());
        }
    }
}

std::vector<int>
Session::segments() const
{
  std::vector<int> s;
  for (int seg = pdi_->get_min_segment_num(); seg <= pdi_->get_max_segment_num(); ++seg)
    s.push_back(seg);
  return s;
}

std::vector<int>
Session::timing_positions() const
{
  std::vector<int> t;
  for (int k = pdi_->get_min_tof_pos_num(); k <= pdi_->get_max_tof_pos_num(); ++k)
    t.push_back(k);
  return t;
}

std::string
Session::timing_problem(const stir::Viewgram<float>& vg) const
{
  const int k = vg.get_timing_pos_num();
  if (k >= pdi_->get_min_tof_pos_num() && k <= pdi_->get_max_tof_pos_num())
    return "";
  std::ostringstream what;
  what << "a viewgram of timing position " << k << ", outside the set-up's timing positions "
       << pdi_->get_min_tof_pos_num() << " .. " << pdi_->get_max_tof_pos_num();
  return what.str();
}

void
Session::require_set_up(const char* what) const
{
  if (python_ == nullptr)
    stir::error(PREFIX + what + " called before set_up");
}

void
Session::fail(std::unique_lock<std::mutex>& lock, const std::string& what)
{
  if (inside_openmp_loop())
    {
      if (pending_error_.empty())
        pending_error_ = what;
      return;
    }
  pending_error_.clear();  // (it is what is reported now, if it was the cause)
  lock.unlock();
  stir::error(PREFIX + what);
}

void
Session::refuse(const std::string& what)
{
  auto lock = lock_releasing_gil(mutex_);
  fail(lock, what);
}

void
Session::raise_pending()
{
  std::string what;
  {
    auto lock = lock_releasing_gil(mutex_);
    what.swap(pending_error_);
  }
  if (!what.empty())
    stir::error(PREFIX + what);
}

void
Session::choose_stir_threads()
{
  if (omp_in_parallel() || omp_get_max_threads() == 1)
    return;
  // see session.h: only the thread holding the GIL can run Python inside STIR's module
  if (!PythonRuntime::get().embedded())
    {
      stir::info(PREFIX + "STIR's projection loops run on one thread while STIR's Python module drives a stirgpu "
                     "projector (the GPUs do the work)",
                 2);
      omp_set_num_threads(1);
    }
  else if (gpus_project_ && std::getenv("OMP_NUM_THREADS") == nullptr)
    {
      stir::info(PREFIX + "STIR's OpenMP loops set to one thread: the GPUs project, and STIR's loop around the "
                     "projector runs faster on one thread (set OMP_NUM_THREADS to choose)",
                 1);
      omp_set_num_threads(1);
    }
}

std::string
Session::report(const char* what, CallCounters& counters)
{
  if (counters.calls == 0 || python_ == nullptr)
    return "";
  const CallCounters c = counters;
  counters = CallCounters();
  try
    {
      PythonRuntime::get().call([&] {
        python_->attr("report_calls")(what, c.calls, c.seconds_waiting, c.seconds_copying, c.seconds_python);
      });
    }
  catch (const PythonError& e)
    {
      if (e.interrupted())  // Python raises KeyboardInterrupt once: a warning here would lose it
        return e.what();
      stir::warning(PREFIX + "the trace of " + what + " could not be written: " + e.what());
    }
  catch (const std::exception& e)
    {
      stir::warning(PREFIX + "the trace of " + what + " could not be written: " + e.what());
    }
  return "";
}

py::dict
Session::as_numpy(Buffers& buffers)
{
  py::dict d;
  const int nt = pdi_->get_num_tangential_poss();
  for (auto& kv : buffers.viewgrams)
    {
      const auto [segment, view, timing_pos] = kv.first;
      d[py::make_tuple(segment, view, timing_pos)]
          = borrowed_array<float>({ pdi_->get_num_axial_poss(segment), nt }, kv.second.data());
    }
  return d;
}

void
Session::set_up(const stir::shared_ptr<const stir::ProjDataInfo>& pdi,
                const stir::shared_ptr<const stir::DiscretisedDensity<3, float>>& image_info)
{
  raise_pending();
  const std::string problem = options_.problem();
  if (!problem.empty())
    stir::error(PREFIX + problem);
  auto lock = lock_releasing_gil(mutex_);
  // stirgpu's CPU kernels are numba's, whose threads are OpenMP's: run from inside STIR's
  // OpenMP loop they would be a nested, inactive region (one thread) unless nesting is allowed
  if (omp_get_max_active_levels() < 2)
    omp_set_max_active_levels(2);
  if (python_ != nullptr && options_ == python_options_ && *pdi == *pdi_
      && image_info->has_same_characteristics(*image_info_))
    return;  // the other projector of the pair set it up
  PythonRuntime& rt = PythonRuntime::get();
  try
    {
      rt.call([&] {
        py::dict opts;
        opts["backend"] = options_.backend;
        opts["devices"] = options_.devices;
        opts["gpu_memory_budget_mb"] = options_.gpu_memory_budget_mb;
        opts["host_memory_budget_mb"] = options_.host_memory_budget_mb;
        opts["max_views_per_chunk"] = options_.max_views_per_chunk;
        opts["restrict_to_cylindrical_fov"] = options_.restrict_to_cylindrical_fov;
        opts["verbosity"] = options_.verbosity;
        py::object session = make_python_session(rt, pdi, *image_info, opts);
        if (python_ != nullptr)
          {
            python_->attr("close")();
            delete python_;
            python_ = nullptr;
          }
        cache_budget_ = session.attr("cache_bytes").cast<std::size_t>();
        gpus_project_ = session.attr("gpus_project").cast<bool>();
        python_ = new py::object(std::move(session));
      });
    }
  catch (const std::exception& e)  // PythonError, or a look-alike refusing the geometry
    {
      lock.unlock();
      stir::error(PREFIX + "set_up: " + e.what());
    }
  python_options_ = options_;
  pdi_ = pdi;
  image_info_ = image_info;
  forward_cache_ = Buffers();
  back_staged_ = Buffers();
  forward_views_.clear();
  back_views_.clear();
  has_input_ = accumulating_ = false;
  learnt_num_subsets_ = 0;
}

void
Session::learn_from(std::set<int>& views)
{
  // views of one period: if they are all views with one remainder modulo N, that is STIR's
  // subset rule for this run
  if (views.size() >= 2)
    {
      const int v0 = *views.begin();
      int g = 0;
      for (int v : views)
        g = std::gcd(g, v - v0);
      bool whole_subset = true;
      int count = 0;
      for (int v = pdi_->get_min_view_num() + ((v0 - pdi_->get_min_view_num()) % g); v <= pdi_->get_max_view_num();
           v += g, ++count)
        whole_subset = whole_subset && views.count(v) == 1;
      if (whole_subset && count == static_cast<int>(views.size()))
        learnt_num_subsets_ = g;
    }
  views.clear();
}

std::vector<int>
Session::batch_views(int view) const
{
  // the rule: the learnt number of subsets if the views of this period follow it, else the
  // one the views of this period give
  int n = learnt_num_subsets_;
  for (int v : forward_views_)
    if (n > 0 && (v - view) % n != 0)
      n = 0;
  if (n == 0)
    for (int v : forward_views_)
      n = std::gcd(n, std::abs(v - view));
  std::vector<int> views;
  if (n == 0)
    views.push_back(view);
  else
    {
      for (int v = view; v <= pdi_->get_max_view_num(); v += n)
        views.push_back(v);
      for (int v = view - n; v >= pdi_->get_min_view_num(); v -= n)
        views.push_back(v);
    }
  // not those cached already, and no more than the cache budget (at least the one asked for);
  // a view is all its segments and timing positions
  const int seg0 = pdi_->get_min_segment_num();
  const int t0 = pdi_->get_min_tof_pos_num();
  views.erase(std::remove_if(views.begin() + 1, views.end(),
                             [&](int v) { return forward_cache_.viewgrams.count({ seg0, v, t0 }) == 1; }),
              views.end());
  std::size_t per_view = 0;
  for (int s : segments())
    per_view += sizeof(float) * pdi_->get_num_axial_poss(s) * pdi_->get_num_tangential_poss();
  per_view *= pdi_->get_num_tof_poss();
  const std::size_t fit = std::max<std::size_t>(1, cache_budget_ / std::max<std::size_t>(per_view, 1));
  if (views.size() > fit)
    views.resize(fit);
  std::sort(views.begin(), views.end());
  return views;
}

double
Session::project_batch(const std::vector<int>& views)
{
  Buffers batch;
  const int nt = pdi_->get_num_tangential_poss();
  for (int s : segments())
    for (int v : views)
      for (int k : timing_positions())
        {
          const std::size_t n = static_cast<std::size_t>(pdi_->get_num_axial_poss(s)) * nt;
          batch.viewgrams[{ s, v, k }].resize(n);
          batch.bytes += n * sizeof(float);
        }
  PythonRuntime& rt = PythonRuntime::get();
  const Clock::time_point start = Clock::now();
  rt.call([&] { python_->attr("forward")(views, as_numpy(batch)); });
  const double seconds = seconds_between(start, Clock::now());
  if (forward_cache_.bytes + batch.bytes > cache_budget_)
    forward_cache_ = Buffers();  // what was served before is not asked for again
  forward_cache_.bytes += batch.bytes;
  forward_cache_.viewgrams.merge(batch.viewgrams);
  return seconds;
}

void
Session::set_input(const stir::DiscretisedDensity<3, float>& image)
{
  raise_pending();
  require_set_up("set_input");
  auto lock = lock_releasing_gil(mutex_);
  if (const std::string stop = report("forward viewgrams", forward_counters_); !stop.empty())
    fail(lock, stop);
  learn_from(forward_views_);
  forward_cache_ = Buffers();
  has_input_ = false;
  choose_stir_threads();
  std::vector<float> copy;
  const float* data;
  if (image.is_contiguous())
    data = image.get_const_full_data_ptr();
  else
    {
      copy.assign(image.begin_all(), image.end_all());
      data = copy.data();
    }
  std::string failure;
  try
    {
      PythonRuntime::get().call([&] { python_->attr("set_input")(borrowed_array(image_shape(image), data)); });
    }
  catch (const std::exception& e)
    {
      failure = e.what();
    }
  if (image.is_contiguous())
    image.release_const_full_data_ptr();
  if (!failure.empty())
    {
      lock.unlock();
      stir::error(PREFIX + "set_input: " + failure);
    }
  has_input_ = true;
}

void
Session::forward_project(stir::RelatedViewgrams<float>& viewgrams)
{
  const Clock::time_point start = Clock::now();
  auto lock = lock_releasing_gil(mutex_);
  const Clock::time_point locked = Clock::now();
  double python = 0;
  std::string failure = pending_error_;
  if (failure.empty() && !has_input_)
    failure = "forward_project called before set_input";
  for (stir::Viewgram<float>& vg : viewgrams)
    {
      const ViewgramKey key{ vg.get_segment_num(), vg.get_view_num(), vg.get_timing_pos_num() };
      if (failure.empty())
        failure = timing_problem(vg);
      if (failure.empty())
        {
          forward_views_.insert(vg.get_view_num());
          if (forward_cache_.viewgrams.count(key) == 0)
            try
              {
                python += project_batch(batch_views(vg.get_view_num()));
              }
            catch (const std::exception& e)
              {
                failure = std::string("forward projection: ") + e.what();
              }
        }
      if (failure.empty())
        {
          const std::vector<float>& cached = forward_cache_.viewgrams.at(key);
          if (cached.size() != viewgram_size(vg))
            failure = "forward_project: a viewgram of another size than the set-up's";
          else
            copy_to_viewgram(cached.data(), vg);
        }
      if (!failure.empty())  // NaN: a result nobody may use (the error comes later in a loop)
        vg.fill(std::numeric_limits<float>::quiet_NaN());
    }
  forward_counters_.add(start, locked, python);
  if (!failure.empty())
    fail(lock, failure);
}

void
Session::start_accumulating()
{
  raise_pending();
  require_set_up("start_accumulating_in_new_target");
  auto lock = lock_releasing_gil(mutex_);
  // a period that never reached get_output
  if (const std::string stop = report("back viewgrams", back_counters_); !stop.empty())
    fail(lock, stop);
  learn_from(back_views_);
  back_staged_ = Buffers();
  choose_stir_threads();
  try
    {
      PythonRuntime::get().call([&] { python_->attr("start_accumulating")(); });
    }
  catch (const std::exception& e)
    {
      lock.unlock();
      stir::error(PREFIX + "start_accumulating_in_new_target: " + e.what());
    }
  accumulating_ = true;
}

double
Session::flush_back_projection()
{
  if (back_staged_.viewgrams.empty())
    return 0;
  std::set<int> views;
  for (const auto& kv : back_staged_.viewgrams)
    views.insert(std::get<1>(kv.first));
  const std::vector<int> list(views.begin(), views.end());
  const Clock::time_point start = Clock::now();
  PythonRuntime::get().call([&] { python_->attr("back")(list, as_numpy(back_staged_)); });
  back_staged_ = Buffers();
  return seconds_between(start, Clock::now());
}

void
Session::back_project(const stir::RelatedViewgrams<float>& viewgrams)
{
  const Clock::time_point start = Clock::now();
  auto lock = lock_releasing_gil(mutex_);
  const Clock::time_point locked = Clock::now();
  double python = 0;
  std::string failure = pending_error_;
  if (failure.empty() && !accumulating_)
    failure = "back_project called before start_accumulating_in_new_target";
  for (const stir::Viewgram<float>& vg : viewgrams)
    {
      if (!failure.empty())
        break;
      failure = timing_problem(vg);
      if (!failure.empty())
        break;
      const ViewgramKey key{ vg.get_segment_num(), vg.get_view_num(), vg.get_timing_pos_num() };
      back_views_.insert(vg.get_view_num());
      std::vector<float>& staged = back_staged_.viewgrams[key];
      if (staged.empty())
        {
          staged.resize(viewgram_size(vg));
          copy_from_viewgram(vg, staged.data());
          back_staged_.bytes += staged.size() * sizeof(float);
        }
      else
        {  // the same viewgram twice: back projections add up
          std::vector<float> more(viewgram_size(vg));
          copy_from_viewgram(vg, more.data());
          if (more.size() != staged.size())
            failure = "back_project: a viewgram of another size than the set-up's";
          else
            std::transform(staged.begin(), staged.end(), more.begin(), staged.begin(), std::plus<float>());
        }
    }
  if (failure.empty() && back_staged_.bytes > cache_budget_)
    try
      {
        python += flush_back_projection();
      }
    catch (const std::exception& e)
      {
        failure = std::string("back projection: ") + e.what();
      }
  back_counters_.add(start, locked, python);
  if (!failure.empty())
    fail(lock, failure);
}

void
Session::get_output(stir::DiscretisedDensity<3, float>& image)
{
  raise_pending();
  require_set_up("get_output");
  auto lock = lock_releasing_gil(mutex_);
  if (!accumulating_)
    {
      lock.unlock();
      stir::error(PREFIX + "get_output called before start_accumulating_in_new_target");
    }
  std::string failure;
  try
    {
      back_counters_.seconds_python += flush_back_projection();
      std::vector<float> copy;
      float* data;
      if (image.is_contiguous())
        data = image.get_full_data_ptr();
      else
        {
          copy.resize(image.size_all());
          data = copy.data();
        }
      try
        {
          PythonRuntime::get().call([&] { python_->attr("get_output")(borrowed_array(image_shape(image), data)); });
        }
      catch (...)
        {
          if (image.is_contiguous())
            image.release_full_data_ptr();
          throw;
        }
      if (image.is_contiguous())
        image.release_full_data_ptr();
      else
        std::copy(copy.begin(), copy.end(), image.begin_all());
    }
  catch (const std::exception& e)
    {
      failure = e.what();
    }
  learn_from(back_views_);
  const std::string stop = report("back viewgrams", back_counters_);
  if (!failure.empty())
    {
      lock.unlock();
      stir::error(PREFIX + "back projection: " + failure);
    }
  if (!stop.empty())
    fail(lock, stop);
}

void
Session::forward_project(stir::ProjData& out, int subset_num, int num_subsets)
{
  raise_pending();
  require_set_up("forward_project");
  auto lock = lock_releasing_gil(mutex_);
  if (!has_input_)
    {
      lock.unlock();
      stir::error(PREFIX + "forward_project called before set_input");
    }
  std::string failure;
  try
    {
      PythonRuntime::get().call([&] {
        ProjDataAccessScope access(out, false);
        python_->attr("forward_proj_data")(access.object(), subset_num, num_subsets);
      });
    }
  catch (const std::exception& e)
    {
      failure = e.what();
    }
  if (!failure.empty())
    {
      lock.unlock();
      stir::error(PREFIX + "forward_project: " + failure);
    }
}

void
Session::back_project(const stir::ProjData& in, int subset_num, int num_subsets)
{
  raise_pending();
  require_set_up("back_project");
  auto lock = lock_releasing_gil(mutex_);
  if (!accumulating_)
    {
      lock.unlock();
      stir::error(PREFIX + "back_project called before start_accumulating_in_new_target");
    }
  std::string failure;
  try
    {
      PythonRuntime::get().call([&] {
        ProjDataAccessScope access(const_cast<stir::ProjData&>(in), true);
        python_->attr("back_proj_data")(access.object(), subset_num, num_subsets);
      });
    }
  catch (const std::exception& e)
    {
      failure = e.what();
    }
  if (!failure.empty())
    {
      lock.unlock();
      stir::error(PREFIX + "back_project: " + failure);
    }
}

} // namespace stirgpu_plugin
