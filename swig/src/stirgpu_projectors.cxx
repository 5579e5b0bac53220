#include "stirgpu_projectors.h"

#include "stir/DataProcessor.h"
#include "stir/DiscretisedDensity.h"
#include "stir/ProjData.h"
#include "stir/RelatedViewgrams.h"
#include "stir/Succeeded.h"
#include "stir/error.h"
#include "stir/recon_buildblock/TrivialDataSymmetriesForBins.h"

#include <limits>
#include <string>

namespace stir
{

namespace
{

// the keys of stirgpu's own "... Using stirgpu Parameters" blocks (stirgpu/parfile/projectors.py)
void
add_option_keys(KeyParser& parser, stirgpu_plugin::Options& o)
{
  parser.add_key("backend", &o.backend);
  parser.add_key("devices", &o.devices);
  parser.add_key("GPU memory budget (MB)", &o.gpu_memory_budget_mb);
  parser.add_key("host memory budget (MB)", &o.host_memory_budget_mb);
  parser.add_key("maximum views per chunk", &o.max_views_per_chunk);
  parser.add_key("restrict to cylindrical FOV", &o.restrict_to_cylindrical_fov);
  parser.add_key("verbosity", &o.verbosity);
}

// post_processing's answer: true means "an error" to STIR's parser
bool
options_are_bad(const stirgpu_plugin::Options& o, const char* block)
{
  const std::string problem = o.problem();
  if (problem.empty())
    return false;
  warning(std::string("stirgpu: ") + block + ": " + problem);
  return true;
}

bool
full_range(const ProjDataInfo& pdi, const RelatedViewgrams<float>& viewgrams, int min_ax, int max_ax, int min_t, int max_t)
{
  const int seg = viewgrams.get_basic_segment_num();
  return min_ax == pdi.get_min_axial_pos_num(seg) && max_ax == pdi.get_max_axial_pos_num(seg)
         && min_t == pdi.get_min_tangential_pos_num() && max_t == pdi.get_max_tangential_pos_num();
}

const char* const PART_REFUSED = "only whole viewgrams are projected (all axial and tangential positions)";

} // namespace

// -- forward ---------------------------------------------------------------------------------

const char* const ForwardProjectorByBinStirgpu::registered_name = "stirgpu";

ForwardProjectorByBinStirgpu::ForwardProjectorByBinStirgpu()
    : session_(std::make_shared<stirgpu_plugin::Session>(stirgpu_plugin::Options())),
      standalone_(true)
{
  set_defaults();
}

ForwardProjectorByBinStirgpu::ForwardProjectorByBinStirgpu(const shared_ptr<stirgpu_plugin::Session>& pair_session)
    : session_(pair_session),
      standalone_(false)
{
  set_defaults();
}

void
ForwardProjectorByBinStirgpu::set_defaults()
{
  ForwardProjectorByBin::set_defaults();
  options_ = stirgpu_plugin::Options();
}

void
ForwardProjectorByBinStirgpu::initialise_keymap()
{
  ForwardProjectorByBin::initialise_keymap();  // "pre data processor"
  parser.add_start_key("Forward Projector Using stirgpu Parameters");
  parser.add_stop_key("End Forward Projector Using stirgpu Parameters");
  add_option_keys(parser, options_);
}

bool
ForwardProjectorByBinStirgpu::post_processing()
{
  return ForwardProjectorByBin::post_processing() || options_are_bad(options_, "Forward Projector Using stirgpu Parameters");
}

void
ForwardProjectorByBinStirgpu::set_up(const shared_ptr<const ProjDataInfo>& proj_data_info_sptr,
                                     const shared_ptr<const DiscretisedDensity<3, float>>& density_info_sptr)
{
  ForwardProjectorByBin::set_up(proj_data_info_sptr, density_info_sptr);
  check(*proj_data_info_sptr, *_density_sptr);
  symmetries_sptr_.reset(new TrivialDataSymmetriesForBins(proj_data_info_sptr));
  if (standalone_)
    session_->options() = options_;
  session_->set_up(_proj_data_info_sptr, _density_sptr);
}

const DataSymmetriesForViewSegmentNumbers*
ForwardProjectorByBinStirgpu::get_symmetries_used() const
{
  if (!_already_set_up)
    error("ForwardProjectorByBinStirgpu: set_up must be called first");
  return symmetries_sptr_.get();
}

void
ForwardProjectorByBinStirgpu::set_input(const DiscretisedDensity<3, float>& density)
{
  if (!_already_set_up)
    error("ForwardProjectorByBinStirgpu: set_up must be called before set_input");
  if (_pre_data_processor_sptr)
    {  // STIR's set_input: a copy, processed; without a processor the image goes up as it is
      ForwardProjectorByBin::set_input(density);
      session_->set_input(*_density_sptr);
    }
  else
    session_->set_input(density);
}

void
ForwardProjectorByBinStirgpu::forward_project(ProjData& proj_data, int subset_num, int num_subsets, bool zero)
{
  if (subset_num < 0 || subset_num >= num_subsets)
    error("forward_project: wrong subset number " + std::to_string(subset_num) + " (of " + std::to_string(num_subsets)
          + " subsets)");
  check(*proj_data.get_proj_data_info_sptr(), *_density_sptr);
  if (zero && num_subsets > 1)
    proj_data.fill(0.F);  // as STIR's forward_project: the other subsets' views are zeros
  session_->forward_project(proj_data, subset_num, num_subsets);
}

void
ForwardProjectorByBinStirgpu::actual_forward_project(RelatedViewgrams<float>& viewgrams,
                                                     const int min_axial_pos_num,
                                                     const int max_axial_pos_num,
                                                     const int min_tangential_pos_num,
                                                     const int max_tangential_pos_num)
{
  if (!full_range(*_proj_data_info_sptr, viewgrams, min_axial_pos_num, max_axial_pos_num, min_tangential_pos_num,
                  max_tangential_pos_num))
    {
      viewgrams.fill(std::numeric_limits<float>::quiet_NaN());
      session_->refuse(PART_REFUSED);
      return;
    }
  session_->forward_project(viewgrams);
}

// -- back ------------------------------------------------------------------------------------

const char* const BackProjectorByBinStirgpu::registered_name = "stirgpu";

BackProjectorByBinStirgpu::BackProjectorByBinStirgpu()
    : session_(std::make_shared<stirgpu_plugin::Session>(stirgpu_plugin::Options())),
      standalone_(true)
{
  set_defaults();
}

BackProjectorByBinStirgpu::BackProjectorByBinStirgpu(const shared_ptr<stirgpu_plugin::Session>& pair_session)
    : session_(pair_session),
      standalone_(false)
{
  set_defaults();
}

BackProjectorByBinStirgpu::BackProjectorByBinStirgpu(const BackProjectorByBinStirgpu& other)
    : RegisteredParsingObject<BackProjectorByBinStirgpu, BackProjectorByBin>(other),
      options_(other.standalone_ ? other.options_ : other.session_->options()),
      session_(std::make_shared<stirgpu_plugin::Session>(options_)),
      standalone_(true),
      symmetries_sptr_(other.symmetries_sptr_)
{}

BackProjectorByBinStirgpu*
BackProjectorByBinStirgpu::clone() const
{
  return new BackProjectorByBinStirgpu(*this);
}

void
BackProjectorByBinStirgpu::set_defaults()
{
  BackProjectorByBin::set_defaults();
  options_ = stirgpu_plugin::Options();
}

void
BackProjectorByBinStirgpu::initialise_keymap()
{
  BackProjectorByBin::initialise_keymap();  // "post data processor"
  parser.add_start_key("Back Projector Using stirgpu Parameters");
  parser.add_stop_key("End Back Projector Using stirgpu Parameters");
  add_option_keys(parser, options_);
}

bool
BackProjectorByBinStirgpu::post_processing()
{
  return BackProjectorByBin::post_processing() || options_are_bad(options_, "Back Projector Using stirgpu Parameters");
}

void
BackProjectorByBinStirgpu::set_up(const shared_ptr<const ProjDataInfo>& proj_data_info_sptr,
                                  const shared_ptr<const DiscretisedDensity<3, float>>& density_info_sptr)
{
  BackProjectorByBin::set_up(proj_data_info_sptr, density_info_sptr);
  check(*proj_data_info_sptr, *_density_sptr);
  symmetries_sptr_.reset(new TrivialDataSymmetriesForBins(proj_data_info_sptr));
  if (standalone_)
    session_->options() = options_;
  session_->set_up(_proj_data_info_sptr, _density_sptr);
}

const DataSymmetriesForViewSegmentNumbers*
BackProjectorByBinStirgpu::get_symmetries_used() const
{
  if (!_already_set_up)
    error("BackProjectorByBinStirgpu: set_up must be called first");
  return symmetries_sptr_.get();
}

void
BackProjectorByBinStirgpu::start_accumulating_in_new_target()
{
  if (!_already_set_up)
    error("BackProjectorByBinStirgpu: set_up must be called before start_accumulating_in_new_target");
  // (STIR's own version zeroes an image-sized copy that is never used here)
  session_->start_accumulating();
}

void
BackProjectorByBinStirgpu::back_project(const ProjData& proj_data, int subset_num, int num_subsets)
{
  if (subset_num < 0 || subset_num >= num_subsets)
    error("back_project: wrong subset number " + std::to_string(subset_num) + " (of " + std::to_string(num_subsets)
          + " subsets)");
  check(*proj_data.get_proj_data_info_sptr(), *_density_sptr);
  session_->back_project(proj_data, subset_num, num_subsets);
}

void
BackProjectorByBinStirgpu::get_output(DiscretisedDensity<3, float>& density) const
{
  std::string explanation;
  if (!_density_sptr->has_same_characteristics(density, explanation))
    error("BackProjectorByBinStirgpu::get_output: the image differs from the set-up's:\n" + explanation);
  session_->get_output(density);
  if (_post_data_processor_sptr && _post_data_processor_sptr->apply(density) != Succeeded::yes)
    error("BackProjectorByBinStirgpu::get_output: the post data processor failed");
}

void
BackProjectorByBinStirgpu::actual_back_project(const RelatedViewgrams<float>& viewgrams,
                                               const int min_axial_pos_num,
                                               const int max_axial_pos_num,
                                               const int min_tangential_pos_num,
                                               const int max_tangential_pos_num)
{
  if (!full_range(*_proj_data_info_sptr, viewgrams, min_axial_pos_num, max_axial_pos_num, min_tangential_pos_num,
                  max_tangential_pos_num))
    {
      session_->refuse(PART_REFUSED);
      return;
    }
  session_->back_project(viewgrams);
}

// -- the pair --------------------------------------------------------------------------------

const char* const ProjectorByBinPairUsingStirgpu::registered_name = "stirgpu";

ProjectorByBinPairUsingStirgpu::ProjectorByBinPairUsingStirgpu()
    : session_(std::make_shared<stirgpu_plugin::Session>(stirgpu_plugin::Options()))
{
  forward_projector_sptr.reset(new ForwardProjectorByBinStirgpu(session_));
  back_projector_sptr.reset(new BackProjectorByBinStirgpu(session_));
  set_defaults();
}

void
ProjectorByBinPairUsingStirgpu::set_defaults()
{
  base_type::set_defaults();
  options_ = stirgpu_plugin::Options();
}

void
ProjectorByBinPairUsingStirgpu::initialise_keymap()
{
  base_type::initialise_keymap();
  parser.add_start_key("Projector Pair Using stirgpu Parameters");
  parser.add_stop_key("End Projector Pair Using stirgpu Parameters");
  add_option_keys(parser, options_);
}

bool
ProjectorByBinPairUsingStirgpu::post_processing()
{
  return base_type::post_processing() || options_are_bad(options_, "Projector Pair Using stirgpu Parameters");
}

Succeeded
ProjectorByBinPairUsingStirgpu::set_up(const shared_ptr<const ProjDataInfo>& proj_data_info_sptr,
                                       const shared_ptr<const DiscretisedDensity<3, float>>& image_info_sptr)
{
  session_->options() = options_;
  return base_type::set_up(proj_data_info_sptr, image_info_sptr);  // both projectors: one session
}

} // namespace stir
