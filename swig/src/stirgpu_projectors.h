// STIR's projector types named "stirgpu": a ForwardProjectorByBin, a BackProjectorByBin and a
// ProjectorByBinPair whose work is done by stirgpu's Python engine (session.h says how).
//
// Parameter blocks (the keys of stirgpu's own "... Using stirgpu Parameters" blocks):
//   Forward Projector Using stirgpu Parameters :=      (Back Projector / Projector Pair ...)
//     backend := auto                  ; auto, cpu or cuda
//     devices := {0, 1}                ; GPU ids; default all
//     GPU memory budget (MB) := 8000   ; default: stirgpu's (free memory less a reserve)
//     host memory budget (MB) := 4000  ; default: stirgpu's; also bounds the plugin's caches
//     maximum views per chunk := 8     ; default: no bound
//     restrict to cylindrical FOV := 1 ; as STIR's Parallelproj projector
//     verbosity := 0
//   End Forward Projector Using stirgpu Parameters :=
// The forward and back projectors also take STIR's "pre data processor" / "post data
// processor".  The symmetries are trivial (one viewgram per call), as Parallelproj's.
#ifndef STIRGPU_STIR_PLUGIN_PROJECTORS_H
#define STIRGPU_STIR_PLUGIN_PROJECTORS_H

#include "session.h"

#include "stir/RegisteredParsingObject.h"
#include "stir/recon_buildblock/BackProjectorByBin.h"
#include "stir/recon_buildblock/ForwardProjectorByBin.h"
#include "stir/recon_buildblock/ProjectorByBinPair.h"

namespace stir
{

class DataSymmetriesForViewSegmentNumbers;

class ForwardProjectorByBinStirgpu : public RegisteredParsingObject<ForwardProjectorByBinStirgpu, ForwardProjectorByBin>
{
public:
  static const char* const registered_name;

  ForwardProjectorByBinStirgpu();
  //! a pair's projector: the session (and its options) belong to the pair
  explicit ForwardProjectorByBinStirgpu(const shared_ptr<stirgpu_plugin::Session>& pair_session);

  void set_up(const shared_ptr<const ProjDataInfo>& proj_data_info_sptr,
              const shared_ptr<const DiscretisedDensity<3, float>>& density_info_sptr) override;
  const DataSymmetriesForViewSegmentNumbers* get_symmetries_used() const override;
  void set_input(const DiscretisedDensity<3, float>& density) override;

  using ForwardProjectorByBin::forward_project;
  //! streamed by stirgpu: only the subset's views are computed and written
  void forward_project(ProjData& proj_data, int subset_num = 0, int num_subsets = 1, bool zero = true) override;

protected:
  void actual_forward_project(RelatedViewgrams<float>& viewgrams,
                              const int min_axial_pos_num,
                              const int max_axial_pos_num,
                              const int min_tangential_pos_num,
                              const int max_tangential_pos_num) override;
  void set_defaults() override;
  void initialise_keymap() override;
  bool post_processing() override;

private:
  stirgpu_plugin::Options options_;
  shared_ptr<stirgpu_plugin::Session> session_;
  bool standalone_;
  shared_ptr<DataSymmetriesForViewSegmentNumbers> symmetries_sptr_;
};

class BackProjectorByBinStirgpu : public RegisteredParsingObject<BackProjectorByBinStirgpu, BackProjectorByBin>
{
public:
  static const char* const registered_name;

  BackProjectorByBinStirgpu();
  explicit BackProjectorByBinStirgpu(const shared_ptr<stirgpu_plugin::Session>& pair_session);
  //! a copy with the same options and its own session (STIR clones the back projector for
  //! the sensitivity of TOF data)
  BackProjectorByBinStirgpu(const BackProjectorByBinStirgpu& other);

  void set_up(const shared_ptr<const ProjDataInfo>& proj_data_info_sptr,
              const shared_ptr<const DiscretisedDensity<3, float>>& density_info_sptr) override;
  const DataSymmetriesForViewSegmentNumbers* get_symmetries_used() const override;

  using BackProjectorByBin::back_project;
  //! streamed by stirgpu: only the subset's views are read
  void back_project(const ProjData& proj_data, int subset_num = 0, int num_subsets = 1) override;
  void start_accumulating_in_new_target() override;
  //! replaces the image's values (STIR's documented behaviour; STIR 6.5's Parallelproj adds)
  void get_output(DiscretisedDensity<3, float>& density) const override;
  BackProjectorByBinStirgpu* clone() const override;

protected:
  void actual_back_project(const RelatedViewgrams<float>& viewgrams,
                           const int min_axial_pos_num,
                           const int max_axial_pos_num,
                           const int min_tangential_pos_num,
                           const int max_tangential_pos_num) override;
  void set_defaults() override;
  void initialise_keymap() override;
  bool post_processing() override;

private:
  stirgpu_plugin::Options options_;
  shared_ptr<stirgpu_plugin::Session> session_;
  bool standalone_;
  shared_ptr<DataSymmetriesForViewSegmentNumbers> symmetries_sptr_;
};

//! Both projectors on one session: one engine, one image upload per set_input.
class ProjectorByBinPairUsingStirgpu
    : public RegisteredParsingObject<ProjectorByBinPairUsingStirgpu, ProjectorByBinPair, ProjectorByBinPair>
{
  typedef RegisteredParsingObject<ProjectorByBinPairUsingStirgpu, ProjectorByBinPair, ProjectorByBinPair> base_type;

public:
  static const char* const registered_name;

  ProjectorByBinPairUsingStirgpu();
  Succeeded set_up(const shared_ptr<const ProjDataInfo>&, const shared_ptr<const DiscretisedDensity<3, float>>&) override;

private:
  void set_defaults() override;
  void initialise_keymap() override;
  bool post_processing() override;

  stirgpu_plugin::Options options_;
  shared_ptr<stirgpu_plugin::Session> session_;
};

} // namespace stir

#endif
